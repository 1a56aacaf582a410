// A progress sign for computations: while htmx fetches new content for a target, the target is
// aria-busy and, once the wait passes SHOW_AFTER_MS, its sign ([data-busy-sign="<target id>"],
// role="status": "Computing…" with a spinner) is shown, so nobody reads old numbers as new or
// wonders whether anything happens. A form with data-busy-sign shows its sign when submitted
// without htmx (a full page load). docs/accessibility.md, "Busy sign".
(function () {
  "use strict";
  var SHOW_AFTER_MS = 300;
  var timers = new WeakMap();

  function sign(id) {
    return id ? document.querySelector('[data-busy-sign="' + id + '"]:not(form)') : null;
  }

  function start(target, id) {
    if (target) target.setAttribute("aria-busy", "true");
    var el = sign(id);
    if (!el) return;
    clearTimeout(timers.get(el));
    timers.set(el, setTimeout(function () { el.hidden = false; }, SHOW_AFTER_MS));
  }

  function stop(target, id) {
    if (target) target.removeAttribute("aria-busy");
    var el = sign(id);
    if (!el) return;
    clearTimeout(timers.get(el));
    el.hidden = true;
  }

  document.addEventListener("htmx:beforeRequest", function (evt) {
    start(evt.detail.target, evt.detail.target && evt.detail.target.id);
  });
  document.addEventListener("htmx:afterRequest", function (evt) {
    stop(evt.detail.target, evt.detail.target && evt.detail.target.id);
  });
  document.addEventListener("submit", function (evt) {
    var form = evt.target;
    if (!form.dataset || !form.dataset.busySign || form.hasAttribute("hx-get") ||
        form.hasAttribute("hx-post")) return;
    start(document.getElementById(form.dataset.busySign), form.dataset.busySign);
  });
  // Back to a page from the browser's cache: no computation is running any more.
  window.addEventListener("pageshow", function () {
    document.querySelectorAll("[data-busy-sign]:not(form)").forEach(function (el) { el.hidden = true; });
  });
})();
