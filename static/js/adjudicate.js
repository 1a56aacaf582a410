// The adjudication page saves each attribute's form as it changes (htmx). A refused save (400)
// carries the reason, which must be shown where the save state is: htmx swaps only 2xx answers.
document.body.addEventListener("htmx:beforeSwap", function (evt) {
  if (evt.detail.xhr.status === 400) {
    evt.detail.shouldSwap = true;
    evt.detail.isError = false;
  }
});
