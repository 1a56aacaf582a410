// Rating page: autosave bookkeeping, number-key shortcuts, active-time heartbeats.
// The saves themselves are htmx requests declared in _response_card.html.
(function () {
  "use strict";
  // After a refused submit, put keyboard focus on the list of what is missing.
  const missing = document.getElementById("missing");
  if (missing) missing.focus();
  const root = document.getElementById("rating");
  if (!root || root.dataset.locked) return;
  const state = document.getElementById("save-state");
  const dirty = new Set(); // elements whose latest edit the server has not acknowledged
  let lastInteraction = Date.now();

  function show(text, cls) {
    state.innerHTML = "";
    const span = document.createElement("span");
    span.className = cls;
    span.textContent = text;
    state.appendChild(span);
  }

  // Each edit records its own time: a retry or a late request keeps the time of the edit, so
  // the server can keep the newest edit when two tabs change the same field.
  function edited(event) {
    const elt = event.target.closest("[hx-post]");
    if (!elt) return;
    elt.dataset.edited = String(Date.now());
    dirty.add(elt);
    show("Saving…", "saving");
  }
  root.addEventListener("change", edited, true);
  root.addEventListener("input", edited, true);

  document.body.addEventListener("htmx:configRequest", function (event) {
    const elt = event.detail.elt;
    if (elt === root || !root.contains(elt)) return; // heartbeats are not saves
    event.detail.parameters.edited_ms = elt.dataset.edited || String(Date.now());
    const checked = elt.querySelector("input:checked");
    if (checked) event.detail.parameters.score = checked.value;
    elt.dataset.sending = elt.dataset.edited;
  });

  document.body.addEventListener("htmx:afterRequest", function (event) {
    const elt = event.detail.elt;
    if (elt === root || !root.contains(elt)) return; // heartbeats are not saves
    const status = event.detail.xhr ? event.detail.xhr.status : 0;
    // htmx fires this after swapping the server's message into #save-state: that message
    // stands unless other edits are still on their way.
    if (event.detail.successful) {
      if (elt.dataset.sending === elt.dataset.edited) dirty.delete(elt);
      if (dirty.size) show("Saving…", "saving");
    } else if (status === 0 || status >= 500) {
      // Network or server trouble: keep the value and try again.
      show("Not saved yet — retrying…", "unsaved");
      setTimeout(function () { htmx.trigger(elt, "retry"); }, 3000);
    } else {
      dirty.delete(elt); // refused for good (locked, invalid): the server's message is shown
    }
  });

  // htmx does not swap error responses by default; show why a save was refused.
  document.body.addEventListener("htmx:beforeSwap", function (event) {
    if (event.detail.target === state && event.detail.xhr.status < 500) {
      event.detail.shouldSwap = true;
      event.detail.isError = false;
    }
  });

  window.addEventListener("beforeunload", function (event) {
    if (dirty.size) event.preventDefault();
  });

  // Number keys 1–5 choose that score in the focused attribute.
  root.addEventListener("keydown", function (event) {
    const radio = event.target;
    if (radio.type !== "radio" || event.altKey || event.ctrlKey || event.metaKey) return;
    const choice = radio.closest("fieldset").querySelector('input[value="' + event.key + '"]');
    if (!choice) return;
    event.preventDefault();
    choice.focus();
    if (!choice.checked) choice.click();
  });

  // Active time: heartbeats only while the page is visible and was used in the last minute.
  ["keydown", "pointerdown", "input", "scroll"].forEach(function (name) {
    window.addEventListener(name, function () { lastInteraction = Date.now(); }, true);
  });
  setInterval(function () {
    if (document.visibilityState !== "visible") return;
    if (Date.now() - lastInteraction > 60000) return;
    htmx.ajax("POST", root.dataset.heartbeatUrl, { swap: "none", source: root });
  }, 15000);
})();
