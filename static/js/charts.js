// Draws every Vega-Lite chart on the page, and in each htmx swap; specs come from json_script tags.
// Expressions run through vega-interpreter instead of Vega's default code generation, which needs
// `new Function` and so would need 'unsafe-eval' in the Content-Security-Policy.
(function () {
  "use strict";
  // Below this container width a chart takes its narrow layout (spec.narrow, analysis/charts.py).
  var NARROW_PX = 560;
  // Room a faceted panel leaves for its attribute labels and legend when its width is "fit".
  var LABELS_PX = 170;

  function merge(target, extra) {
    Object.keys(extra).forEach(function (key) {
      var value = extra[key];
      if (value && typeof value === "object" && !Array.isArray(value) &&
          target[key] && typeof target[key] === "object" && !Array.isArray(target[key])) {
        merge(target[key], value);
      } else {
        target[key] = value;
      }
    });
    return target;
  }

  // A chart's title is one line in Vega, as wide as its text: on a phone, lines of words.
  function wrapTitle(spec, width) {
    if (typeof spec.title !== "string") return;
    var perLine = Math.max(16, Math.floor(width / 8)), lines = [], line = "";
    spec.title.split(" ").forEach(function (word) {
      if (line && (line + " " + word).length > perLine) { lines.push(line); line = word; }
      else line = line ? line + " " + word : word;
    });
    if (line) lines.push(line);
    spec.title = lines;
  }

  function fitted(spec, width) {
    var narrow = spec.narrow;
    delete spec.narrow;
    if (narrow && width < NARROW_PX) merge(spec, narrow);
    if (width < NARROW_PX) wrapTitle(spec, width);
    if (spec.spec && spec.spec.width === "fit") spec.spec.width = Math.max(120, width - LABELS_PX);
    // Wrapped panels (a facet with "columns"): no more columns than the container holds.
    if (typeof spec.columns === "number" && spec.spec && typeof spec.spec.width === "number") {
      var fits = Math.floor(width / (spec.spec.width + LABELS_PX));
      spec.columns = Math.max(1, Math.min(spec.columns, fits));
    }
    return spec;
  }

  function drawOne(el) {
    var spec = fitted(JSON.parse(document.getElementById(el.dataset.vegaSpec).textContent),
                      el.clientWidth);
    return vegaEmbed(el, spec, {
      ast: true,
      expr: vega.expressionInterpreter,
      actions: {export: true, source: false, compiled: false, editor: false},
    })
      .then(function () {
        // The export menu's toggle is an icon only: give it a name screen readers can say.
        var summary = el.querySelector("details > summary");
        if (summary) summary.setAttribute("aria-label", "Save this chart as an image");
        el.dataset.drawn = "1";
      })
      .catch(function (err) { el.textContent = "Chart could not be drawn: " + err; });
  }

  function onScreen(el) {
    var box = el.getBoundingClientRect();
    return box.top < window.innerHeight && box.bottom > 0;
  }

  // The charts on the first screen first, together; the others one at a time after them, each
  // when the browser is idle, so the page answers the reader's scroll and clicks meanwhile
  // instead of laying out a dozen charts before anything else (benchmarks/dashboard_draw.py).
  // The page marks both moments for that benchmark.
  function drawCharts(root) {
    var all = Array.prototype.slice.call(root.querySelectorAll("[data-vega-spec]"));
    var first = all.filter(onScreen), later = all.filter(function (el) { return !onScreen(el); });
    // A busy browser may have no idle moment for a long while: a chart waits at most a second.
    var idle = window.requestIdleCallback
      ? function (fn) { return window.requestIdleCallback(fn, {timeout: 1000}); }
      : function (fn) { return setTimeout(fn, 1); };
    Promise.all(first.map(drawOne)).then(function () {
      performance.mark("mentalbench:first-screen");
      return later.reduce(function (previous, el) {
        return previous.then(function () {
          return new Promise(function (resolve) { idle(function () { drawOne(el).then(resolve); }); });
        });
      }, Promise.resolve());
    }).then(function () { performance.mark("mentalbench:charts-drawn"); });
  }
  document.addEventListener("DOMContentLoaded", function () {
    drawCharts(document);
    document.body.addEventListener("htmx:afterSwap", function (evt) { drawCharts(evt.detail.target); });
  });
})();
