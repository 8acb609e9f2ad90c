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

// Diagrams: zoom (buttons, +/-/0/1 keys, ctrl + wheel around the pointer) and pan (drag, or
// scroll). The SVG keeps its viewBox; zooming sets its width and height. The first view is
// the whole width when that stays readable, else a readable size to pan around, centred on
// the run's current state. Zoom and
// scroll survive the run page's reloads (sessionStorage, per page).
(function () {
  "use strict";
  var READABLE = 0.75, MIN = 0.1, MAX = 4, STEP = 1.25;
  function points(value) {  // "1532pt" or "2042px" -> CSS pixels
    var n = parseFloat(value || "0");
    return /pt$/.test(value || "") ? n * 4 / 3 : n;
  }
  document.querySelectorAll("[data-zoom]").forEach(function (box) {
    var view = box.querySelector(".zoom-view");
    var svg = view && view.querySelector("svg");
    if (!svg) { return; }
    var width = points(svg.getAttribute("width")), height = points(svg.getAttribute("height"));
    if (!width || !height) { return; }
    var level = box.querySelector(".zoom-level");
    var key = "zoom:" + window.location.pathname;
    var scale = 1;
    function fitWidth() { return (view.clientWidth - 2) / width; }
    function fitAll() { return Math.min(fitWidth(), (view.clientHeight - 2) / height); }
    function apply(next, px, py) {
      next = Math.max(MIN, Math.min(MAX, next));
      px = px === undefined ? view.clientWidth / 2 : px;
      py = py === undefined ? view.clientHeight / 2 : py;
      var cx = (view.scrollLeft + px) / scale, cy = (view.scrollTop + py) / scale;
      scale = next;
      svg.setAttribute("width", String(Math.round(width * scale)));
      svg.setAttribute("height", String(Math.round(height * scale)));
      view.scrollLeft = cx * scale - px;
      view.scrollTop = cy * scale - py;
      box.dataset.scale = scale.toFixed(3);
      if (level) { level.textContent = Math.round(scale * 100) + "%"; }
      remember();
    }
    function remember() {
      try {
        window.sessionStorage.setItem(key, JSON.stringify(
          [scale, view.scrollLeft, view.scrollTop]));
      } catch (e) { /* storage off: zoom is just not kept */ }
    }
    var saved = null;
    try { saved = JSON.parse(window.sessionStorage.getItem(key) || "null"); } catch (e) {}
    if (saved && saved.length === 3) {
      apply(saved[0], 0, 0);
      view.scrollLeft = saved[1]; view.scrollTop = saved[2];
    } else {
      apply(Math.min(1, Math.max(READABLE, fitWidth())), 0, 0);
      view.scrollLeft = 0; view.scrollTop = 0;
      focus();
    }
    function focus() {  // bring the run's current state into view
      var fill = box.dataset.focusFill;
      var shape = fill && svg.querySelector('g.node [fill="' + fill + '"]');
      if (!shape) { return; }
      var r = shape.getBoundingClientRect(), v = view.getBoundingClientRect();
      view.scrollTop += r.top + r.height / 2 - (v.top + v.height / 2);
      view.scrollLeft += r.left + r.width / 2 - (v.left + v.width / 2);
    }
    var actions = {
      "in": function () { apply(scale * STEP); },
      "out": function () { apply(scale / STEP); },
      "fit": function () { apply(fitAll(), 0, 0); view.scrollLeft = 0; view.scrollTop = 0; },
      "real": function () { apply(1); }
    };
    box.querySelectorAll("[data-zoom-act]").forEach(function (button) {
      button.addEventListener("click", function () { actions[button.dataset.zoomAct](); });
    });
    view.addEventListener("keydown", function (e) {
      var act = { "+": "in", "=": "in", "-": "out", "0": "fit", "1": "real" }[e.key];
      if (act) { e.preventDefault(); actions[act](); }
    });
    view.addEventListener("wheel", function (e) {
      if (!e.ctrlKey && !e.metaKey) { return; }  // a plain wheel scrolls (pans) as usual
      e.preventDefault();
      var r = view.getBoundingClientRect();
      apply(scale * (e.deltaY < 0 ? STEP : 1 / STEP), e.clientX - r.left, e.clientY - r.top);
    }, { passive: false });
    view.addEventListener("scroll", remember);
    var drag = null, dragged = false;
    view.addEventListener("pointerdown", function (e) {
      if (e.button !== 0) { return; }
      drag = { x: e.clientX, y: e.clientY, left: view.scrollLeft, top: view.scrollTop };
      dragged = false;
    });
    window.addEventListener("pointermove", function (e) {
      if (!drag) { return; }
      var dx = e.clientX - drag.x, dy = e.clientY - drag.y;
      if (!dragged && Math.abs(dx) + Math.abs(dy) < 5) { return; }
      dragged = true;
      view.classList.add("dragging");
      view.scrollLeft = drag.left - dx;
      view.scrollTop = drag.top - dy;
    });
    window.addEventListener("pointerup", function () {
      drag = null;
      view.classList.remove("dragging");
    });
    // a drag that ends on a state's link must not follow it
    view.addEventListener("click", function (e) {
      if (dragged) { e.preventDefault(); e.stopPropagation(); dragged = false; }
    }, true);
  });
}());
