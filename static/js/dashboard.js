// A filter form whose results are #report (the reliability dashboard, the judge-assisted
// page): a filter the server refused (400) or failed on (5xx,
// network) replaces the report, so the numbers of the previous subset never stand under the
// filter now chosen.
document.addEventListener("DOMContentLoaded", function () {
  document.body.addEventListener("htmx:beforeSwap", function (evt) {
    if (evt.detail.target.id !== "report" || evt.detail.xhr.status < 400) return;
    evt.detail.shouldSwap = true;
    evt.detail.isError = false;
    if (evt.detail.xhr.status >= 500) {
      evt.detail.serverResponse = '<div class="card error-summary" role="alert"><h2>The report ' +
        'could not be computed for this filter</h2><p>The server answered ' +
        evt.detail.xhr.status + '. No numbers are shown; change the filter or reload.</p></div>';
    }
  });
  document.body.addEventListener("htmx:sendError", function (evt) {
    var report = document.getElementById("report");
    if (evt.detail.target !== report) return;
    report.innerHTML = '<div class="card error-summary" role="alert"><h2>The report could ' +
      'not be loaded</h2><p>The server could not be reached. No numbers are shown; reload ' +
      'to try again.</p></div>';
  });

  // A link to a folded part (the contents' #table-…, a method's #term-…) opens it: the browser
  // scrolls to a closed <details> but leaves what it holds hidden.
  function reveal(id) {
    var target = id && document.getElementById(id);
    for (var d = target && target.closest("details"); d; d = d.parentElement.closest("details")) {
      d.open = true;
    }
  }
  document.addEventListener("click", function (evt) {
    var link = evt.target.closest && evt.target.closest('a[href^="#"]');
    if (link) reveal(link.getAttribute("href").slice(1));
  });
  window.addEventListener("hashchange", function () { reveal(location.hash.slice(1)); });
  reveal(location.hash.slice(1));
});
