// Rating page: autosave bookkeeping, keyboard flow, anchors and progress, active-time heartbeats.
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

  // Unsent edits are also kept in localStorage until the server acknowledges them, so closing or
  // reloading the tab mid-save loses nothing: the next load of this page sends them again, with
  // the time of the edit, and the server's edit clock keeps the newest value as for two tabs.
  // Only what the page itself posts is stored: blinded item tokens, attribute ids and values.
  const storeKey = "mentalbench.unsent:" + window.location.pathname;
  function fieldKey(elt) {
    return elt.getAttribute("hx-post") + "|" + (elt.getAttribute("hx-vals") || "");
  }
  function readUnsent() {
    try {
      return JSON.parse(window.localStorage.getItem(storeKey) || "{}");
    } catch (error) {
      return {}; // storage disabled or unreadable: autosave still works, without this safety net
    }
  }
  function writeUnsent(unsent) {
    try {
      if (Object.keys(unsent).length) window.localStorage.setItem(storeKey, JSON.stringify(unsent));
      else window.localStorage.removeItem(storeKey);
    } catch (error) {
      // Full or disabled storage: the edit is still being sent; only the net is missing.
    }
  }
  // The values of one field as [name, value] pairs: its checked choices or its text.
  function valuesOf(elt) {
    const inputs = elt.matches("input, textarea") ? [elt] : elt.querySelectorAll("input, textarea");
    const pairs = [];
    inputs.forEach(function (input) {
      if (input.type === "radio" || input.type === "checkbox") {
        if (input.checked) pairs.push([input.name, input.value]);
      } else {
        pairs.push([input.name, input.value]);
      }
    });
    return pairs;
  }
  function restore(elt, pairs) {
    const inputs = elt.matches("input, textarea") ? [elt] : elt.querySelectorAll("input, textarea");
    inputs.forEach(function (input) {
      if (input.type === "radio" || input.type === "checkbox") {
        input.checked = pairs.some(function (p) { return p[0] === input.name && p[1] === input.value; });
      } else {
        const pair = pairs.find(function (p) { return p[0] === input.name; });
        if (pair) input.value = pair[1];
      }
    });
  }
  function remember(elt) {
    const unsent = readUnsent();
    unsent[fieldKey(elt)] = { edited: elt.dataset.edited, values: valuesOf(elt) };
    writeUnsent(unsent);
  }
  function forget(elt, edited) {
    const unsent = readUnsent();
    const entry = unsent[fieldKey(elt)];
    // A newer edit of the same field may have been stored meanwhile: that one stays.
    if (entry && entry.edited === edited) {
      delete unsent[fieldKey(elt)];
      writeUnsent(unsent);
    }
  }

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
    remember(elt);
    show("Saving…", "saving");
  }
  root.addEventListener("change", edited, true);
  root.addEventListener("input", edited, true);

  // Edits a previous load of this page did not get acknowledged: show them and send them again
  // through the same request as a fresh edit, keeping their original edit time.
  (function resend() {
    const unsent = readUnsent();
    const fields = {};
    root.querySelectorAll("[hx-post]").forEach(function (elt) { fields[fieldKey(elt)] = elt; });
    Object.keys(unsent).forEach(function (key) {
      const elt = fields[key];
      const entry = unsent[key];
      if (!elt || !entry || !entry.edited) {
        delete unsent[key]; // a field this page no longer has
        return;
      }
      restore(elt, entry.values);
      elt.dataset.edited = entry.edited;
      dirty.add(elt);
    });
    writeUnsent(unsent);
    if (!dirty.size) return;
    show("Saving…", "saving");
    // Only once htmx has processed the page (its own DOMContentLoaded handler, registered
    // first, runs first) does an element listen to its "retry" trigger.
    function send() {
      window.setTimeout(function () {
        dirty.forEach(function (elt) { htmx.trigger(elt, "retry"); });
      }, 0);
    }
    if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", send);
    else send();
  })();

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
      // Stored, or a newer value from another tab kept: either way this edit is settled.
      forget(elt, elt.dataset.sending);
      if (elt.dataset.sending === elt.dataset.edited) dirty.delete(elt);
      if (dirty.size) show("Saving…", "saving");
    } else if (status === 401) {
      // Signed out (an idle session ended): the edit stays in the journal, and htmx follows
      // HX-Redirect to the sign-in page, which brings the clinician back here to send it.
      show("Signed out — sign in again; your changes are kept", "unsaved");
      dirty.clear(); // nothing to warn about on leaving: the journal holds every edit
    } else if (status === 0 || status >= 500) {
      // Network or server trouble: keep the value and try again.
      show("Not saved yet — retrying…", "unsaved");
      setTimeout(function () { htmx.trigger(elt, "retry"); }, 3000);
    } else {
      // Refused for good (locked, invalid): the server's message is shown, and sending the
      // same edit again on the next load would only be refused again.
      forget(elt, elt.dataset.sending);
      dirty.delete(elt);
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

  // --- Keyboard flow, anchors and progress ------------------------------------------------------
  // The rubric panel holds each attribute's name and anchors once; the radios get their full
  // accessible names ("Response B, Guidance: 3 — <anchor>") and the line under each attribute
  // its anchor from there, so the page does not repeat every anchor for every response.
  const panel = document.getElementById("rubric");
  const rubric = {};
  if (panel) {
    panel.querySelectorAll(".rubric-attr").forEach(function (sec) {
      const anchors = {};
      sec.querySelectorAll("li[data-value]").forEach(function (li) {
        anchors[li.dataset.value] = li.textContent.replace(/^\s*\d+\s*/, "");
      });
      rubric[sec.dataset.attribute] = { name: sec.dataset.name, anchors: anchors, section: sec };
    });
  }
  // Responses rated in an earlier part are read-only: keys and "next unrated" skip them.
  const fields = Array.prototype.slice.call(root.querySelectorAll(".response:not(.earlier) fieldset.attribute"));
  function anchorOf(fieldset, value) {
    const entry = rubric[fieldset.dataset.attribute];
    return entry && value ? entry.anchors[value] || "" : "";
  }
  function showAnchor(fieldset, value) {
    const line = fieldset.querySelector(".anchor-line");
    const text = anchorOf(fieldset, value);
    if (line) line.textContent = text ? value + " — " + text : "";
  }
  function checkedValue(fieldset) {
    const checked = fieldset.querySelector("input:checked");
    return checked ? checked.value : "";
  }
  fields.forEach(function (fieldset) {
    const entry = rubric[fieldset.dataset.attribute];
    const card = fieldset.closest(".response");
    if (entry && card) {
      fieldset.querySelectorAll("input[type=radio]").forEach(function (radio) {
        radio.setAttribute(
          "aria-label",
          "Response " + card.dataset.label + ", " + entry.name + ": " + radio.value +
            " — " + (entry.anchors[radio.value] || "")
        );
      });
    }
    showAnchor(fieldset, checkedValue(fieldset));
  });

  const scoredOut = document.getElementById("scored");
  function countScores() {
    let total = 0;
    root.querySelectorAll(".response").forEach(function (card) {
      const done = card.querySelectorAll("fieldset.attribute input:checked").length;
      const mark = card.querySelector(".done-mark");
      if (!card.classList.contains("earlier")) total += done;
      if (mark) {
        mark.textContent = done + "/" + mark.dataset.total;
        card.classList.toggle("done", String(done) === mark.dataset.total);
      }
    });
    if (scoredOut) scoredOut.textContent = String(total);
  }
  root.addEventListener("change", function (event) {
    const fieldset = event.target.closest("fieldset.attribute");
    if (!fieldset) return;
    showAnchor(fieldset, checkedValue(fieldset));
    countScores();
  });

  // Where focus goes in a group: its chosen score, or its first.
  function focusField(fieldset) {
    const target = fieldset.querySelector("input:checked") || fieldset.querySelector("input");
    target.focus();
  }
  const submitButton = document.getElementById("submit-conversation");
  function nextUnrated(from) {
    const start = from ? fields.indexOf(from) + 1 : 0;
    for (let k = 0; k < fields.length; k += 1) {
      const fieldset = fields[(start + k) % fields.length];
      if (!fieldset.querySelector("input:checked")) return fieldset;
    }
    return null;
  }
  root.addEventListener("focusin", function (event) {
    const fieldset = event.target.closest("fieldset.attribute");
    if (!fieldset) return;
    if (event.target.type === "radio") showAnchor(fieldset, event.target.value);
    const entry = rubric[fieldset.dataset.attribute];
    if (!entry || entry.section.classList.contains("current")) return;
    panel.querySelectorAll(".rubric-attr.current").forEach(function (s) { s.classList.remove("current"); });
    entry.section.classList.add("current");
    if (panel.scrollHeight > panel.clientHeight) panel.scrollTop = entry.section.offsetTop - 48;
  });
  root.addEventListener("focusout", function (event) {
    const fieldset = event.target.closest("fieldset.attribute");
    if (fieldset && !fieldset.contains(event.relatedTarget)) showAnchor(fieldset, checkedValue(fieldset));
  });

  // A digit picks that score and moves on to the next attribute (the next response's first
  // after the last), so a conversation takes one keystroke per score.
  root.addEventListener("keydown", function (event) {
    const radio = event.target;
    if (radio.type !== "radio" || event.altKey || event.ctrlKey || event.metaKey) return;
    const fieldset = radio.closest("fieldset");
    const choice = fieldset.querySelector('input[value="' + event.key + '"]');
    if (!choice) return;
    event.preventDefault();
    if (!choice.checked) choice.click();
    const next = fields[fields.indexOf(fieldset) + 1];
    if (next) focusField(next);
    else if (submitButton) submitButton.focus();
  });

  // N: the next attribute without a score; Ctrl+Enter: submit, from anywhere on the page.
  const submitForm = document.getElementById("submit-form");
  let submitWhenSaved = false;
  if (fields.length) document.addEventListener("keydown", function (event) {
    const typing = event.target.matches && event.target.matches("textarea, input[type=text], select");
    if (event.key === "Enter" && (event.ctrlKey || event.metaKey) && submitForm) {
      event.preventDefault();
      submitForm.requestSubmit();
    } else if ((event.key === "n" || event.key === "N") && !typing && !event.ctrlKey && !event.metaKey && !event.altKey) {
      const current = event.target.closest ? event.target.closest("fieldset.attribute") : null;
      const target = nextUnrated(current);
      event.preventDefault();
      if (target) focusField(target);
      else if (submitButton) submitButton.focus();
    }
  });
  // Submitting while a save is on its way would check scores the server does not have yet:
  // wait for the saves, then submit.
  if (submitForm) {
    submitForm.addEventListener("submit", function (event) {
      if (!dirty.size) return;
      event.preventDefault();
      submitWhenSaved = true;
      show("Saving… the conversation is submitted once every change is saved", "saving");
    });
    document.body.addEventListener("htmx:afterRequest", function () {
      if (submitWhenSaved && !dirty.size) {
        submitWhenSaved = false;
        dirty.clear();
        submitForm.requestSubmit();
      }
    });
  }
  // On a narrow screen the rubric opens over the page: closing it goes back where one was.
  const close = panel ? panel.querySelector(".rubric-close") : null;
  if (close) {
    close.addEventListener("click", function (event) {
      if (window.location.hash === "#rubric") {
        event.preventDefault();
        window.history.back();
      }
    });
  }

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
