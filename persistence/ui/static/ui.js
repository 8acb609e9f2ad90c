// Run page: reload when the run moves (a worker applied an event, a timer fired, it ended),
// so an operator who sent an event watches the state change. Polls only while the run is live.
(function () {
  "use strict";
  var head = document.getElementById("run");
  if (!head || head.dataset.live !== "yes") { return; }
  var version = head.dataset.version;
  var pending = head.dataset.pending;
  var url = "/api/runs/" + encodeURIComponent(head.dataset.run);
  function check() {
    fetch(url, { headers: { "Accept": "application/json" }, credentials: "same-origin" })
      .then(function (r) { return r.ok ? r.json() : null; })
      .then(function (run) {
        if (!run) { return; }
        var queued = String(run.queued_events.length);
        if (String(run.version) !== version || queued !== pending) {
          var clean = window.location.pathname;  // drop the one-off ?done= message
          window.location.replace(clean);
        }
      })
      .catch(function () { /* store briefly unavailable: try again next tick */ });
  }
  window.setInterval(check, 1500);
}());
