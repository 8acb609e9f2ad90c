-- The follow-up database (SQLite). Dates are ISO text (yyyy-mm-dd), instants epoch ms.

create table cadences (
  name text primary key,
  offsets text not null  -- JSON array of business-day offsets from the day the watch opened
);

create table holidays (
  day text primary key,
  name text not null
);

create table watches (
  id integer primary key,
  subject_type text not null,
  subject_id text not null,
  subject_name text not null,  -- denormalized: reports read well while the CRM is down
  cadence text not null references cadences (name),
  status text not null default 'open' check (status in ('open', 'closed')),
  closed_reason text,
  opened_on text not null,
  opened_at integer not null,
  closed_at integer,
  summary text,
  summarized_at integer
);

-- One open watch per subject: a retried webhook never resets a running cadence.
create unique index watches_one_open_per_subject on watches (subject_type, subject_id)
  where status = 'open';

create table watch_steps (
  id integer primary key,
  watch_id integer not null references watches (id),
  step integer not null,
  due_on text not null,
  status text not null default 'pending' check (status in ('pending', 'fired', 'skipped')),
  task_id text,
  fired_on text,
  fired_at integer,
  unique (watch_id, step)
);

create index watch_steps_pending_by_due on watch_steps (due_on) where status = 'pending';

create table run_log (
  id integer primary key,
  workflow text not null,
  run_key text not null,
  status text not null
    check (status in ('running', 'ok', 'partial', 'failed', 'abandoned')),
  started_at integer not null,
  finished_at integer,
  detail text,
  alert_key text,
  alerted_at integer,
  unique (workflow, run_key)
);

-- One run at a time per workflow: the claim is a 'running' row.
create unique index run_log_one_running on run_log (workflow) where status = 'running';

create index run_log_alerts on run_log (alert_key, alerted_at);

insert into cadences (name, offsets) values ('default', '[5, 12, 21]');
