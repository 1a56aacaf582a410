// A <select data-autosubmit> submits its form when changed (inline onchange handlers are refused
// by the Content-Security-Policy).
document.addEventListener("change", function (evt) {
  if (evt.target.matches("select[data-autosubmit]")) evt.target.form.submit();
});
