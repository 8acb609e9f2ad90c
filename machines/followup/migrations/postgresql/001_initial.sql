-- The follow-up database (PostgreSQL). Instants are epoch ms (bigint), as on SQLite.

create table cadences (
  name text primary key,
  offsets jsonb not null  -- array of business-day offsets from the day the watch opened
);

create table holidays (
  day date primary key,
  name text not null
);

create table watches (
  id bigint generated always as identity primary key,
  subject_type text not null,
  subject_id text not null,
  subject_name text not null,  -- denormalized: reports read well while the CRM is down
  cadence text not null references cadences (name),
  status text not null default 'open' check (status in ('open', 'closed')),
  closed_reason text,
  opened_on date not null,
  opened_at bigint not null,
  closed_at bigint,
  summary text,
  summarized_at bigint
);

-- One open watch per subject: a retried webhook never resets a running cadence.
create unique index watches_one_open_per_subject on watches (subject_type, subject_id)
  where status = 'open';

create table watch_steps (
  id bigint generated always as identity primary key,
  watch_id bigint not null references watches (id),
  step integer not null,
  due_on date not null,
  status text not null default 'pending' check (status in ('pending', 'fired', 'skipped')),
  task_id text,
  fired_on date,
  fired_at bigint,
  unique (watch_id, step)
);

create index watch_steps_pending_by_due on watch_steps (due_on) where status = 'pending';

create table run_log (
  id bigint generated always as identity primary key,
  workflow text not null,
  run_key text not null,
  status text not null
    check (status in ('running', 'ok', 'partial', 'failed', 'abandoned')),
  started_at bigint not null,
  finished_at bigint,
  detail text,
  alert_key text,
  alerted_at bigint,
  unique (workflow, run_key)
);

-- One run at a time per workflow: the claim is a 'running' row.
create unique index run_log_one_running on run_log (workflow) where status = 'running';

create index run_log_alerts on run_log (alert_key, alerted_at);

insert into cadences (name, offsets) values ('default', '[5, 12, 21]');
