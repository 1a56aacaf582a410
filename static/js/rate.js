// Rating and labelling pages: autosave, keyboard flow, anchors and progress, active-time
// heartbeats. Every element with data-save (a score's fieldset, a rationale, the label form) posts
// its value to that URL on each change, one request at a time per element (a newer edit waits
// for the one in flight, then the latest value goes). No library: this is the page clinicians
// open most, so it stays small.
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
    return elt.dataset.save + "|" + (elt.dataset.vals || "");
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

  // --- Sending -----------------------------------------------------------------------------------
  const tokenInput = document.querySelector("input[name=csrfmiddlewaretoken]");
  const csrf = tokenInput ? tokenInput.value : "";
  let submitWhenSaved = false;
  let afterSave = function () {};

  // A request as the server expects it: form-encoded, with the CSRF token, marked as a request
  // of the page (HX-Request) so that an ended session answers 401 with where to sign in, instead
  // of a redirect that would look like a saved edit.
  function post(url, body) {
    return window.fetch(url, {
      method: "POST",
      body: body,
      credentials: "same-origin",
      headers: {
        "X-CSRFToken": csrf,
        "HX-Request": "true",
        "HX-Current-URL": window.location.href,
      },
    });
  }
  function signedOut(response) {
    // The edit stays in the journal and is sent after the next sign-in, which brings the
    // clinician back to this page.
    show("Signed out — sign in again; your changes are kept", "unsaved");
    dirty.clear(); // nothing to warn about on leaving: the journal holds every edit
    const to = response.headers.get("HX-Redirect");
    if (to) window.location.href = to;
  }
  // The field's current values, with the edit's time: a score's fieldset sends its checked score,
  // a rationale its text, the label form every choice.
  function bodyOf(elt) {
    const body = new URLSearchParams();
    const vals = JSON.parse(elt.dataset.vals || "{}");
    Object.keys(vals).forEach(function (key) { body.append(key, vals[key]); });
    if (elt.tagName === "FORM") {
      new FormData(elt).forEach(function (value, key) { body.append(key, value); });
    } else if (elt.tagName === "TEXTAREA") {
      body.append(elt.name, elt.value);
    } else {
      const checked = elt.querySelector("input:checked");
      if (checked) body.append("score", checked.value);
    }
    body.append("edited_ms", elt.dataset.edited || String(Date.now()));
    return body;
  }
  function send(elt) {
    if (elt.dataset.inflight) {
      elt.dataset.queued = "1"; // sent when the one in flight is answered: the latest value
      return;
    }
    elt.dataset.inflight = "1";
    elt.dataset.sending = elt.dataset.edited;
    post(elt.dataset.save, bodyOf(elt))
      .then(function (response) {
        if (response.status === 401) return signedOut(response);
        if (response.status >= 500) return retry(elt);
        return response.text().then(function (text) {
          // The server's message ("All changes saved", or why the edit was refused) stands
          // unless other edits are still on their way.
          state.innerHTML = text;
          // Stored, a newer value from another tab kept, or refused for good (locked, invalid:
          // sending it again on the next load would only be refused again): settled either way.
          forget(elt, elt.dataset.sending);
          if (!response.ok || elt.dataset.sending === elt.dataset.edited) dirty.delete(elt);
          if (dirty.size) show("Saving…", "saving");
        });
      }, function () {
        retry(elt); // network trouble: keep the value and try again
      })
      .then(function () {
        delete elt.dataset.inflight;
        if (elt.dataset.queued) {
          delete elt.dataset.queued;
          send(elt);
        }
        afterSave();
      });
  }
  function retry(elt) {
    show("Not saved yet — retrying…", "unsaved");
    window.setTimeout(function () { send(elt); }, 3000);
  }

  // Each edit records its own time: a retry or a late request keeps the time of the edit, so
  // the server can keep the newest edit when two tabs change the same field.
  const timers = new Map();
  function edited(event) {
    const elt = event.target.closest("[data-save]");
    if (!elt) return;
    elt.dataset.edited = String(Date.now());
    dirty.add(elt);
    remember(elt);
    show("Saving…", "saving");
    window.clearTimeout(timers.get(elt));
    if (event.type === "input" && elt.dataset.delay) {
      // Typing: sent once the clinician pauses, and on leaving the field (change).
      timers.set(elt, window.setTimeout(function () { send(elt); }, Number(elt.dataset.delay)));
    } else if (event.type === "change") {
      send(elt);
    }
  }
  root.addEventListener("change", edited, true);
  root.addEventListener("input", edited, true);
  // The label form is never submitted as a page: its changes are saved as they happen.
  root.querySelectorAll("form[data-save]").forEach(function (form) {
    form.addEventListener("submit", function (event) { event.preventDefault(); });
  });

  // Edits a previous load of this page did not get acknowledged: show them and send them again
  // as fresh edits, keeping their original edit time.
  (function resend() {
    const unsent = readUnsent();
    const fields = {};
    root.querySelectorAll("[data-save]").forEach(function (elt) { fields[fieldKey(elt)] = elt; });
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
    dirty.forEach(send);
  })();

  window.addEventListener("beforeunload", function (event) {
    if (dirty.size) event.preventDefault();
  });

  // --- Unsafe marks ------------------------------------------------------------------------------
  // A response's "mark unsafe" and "withdraw" forms work as plain forms; here they are sent in the
  // background and the server's answer (the block again, with why when refused) takes their
  // place, so the scores typed meanwhile stay on the page. Focus goes to what follows the action.
  root.addEventListener("submit", function (event) {
    const form = event.target;
    if (!form.matches("form[data-unsafe]")) return;
    event.preventDefault();
    const block = form.closest(".unsafe");
    const body = new URLSearchParams(new FormData(form));
    // getAttribute: the form holds an input named "action", which form.action would return.
    post(form.getAttribute("action"), body).then(function (response) {
      if (response.status === 401) return signedOut(response);
      if (response.status >= 500) {
        show("Not saved — try again", "unsaved");
        return;
      }
      return response.text().then(function (text) {
        if (!response.headers.get("Content-Type") || text.indexOf('class="unsafe') === -1) {
          state.innerHTML = text; // a refusal that is not about one response's block
          return;
        }
        const holder = document.createElement("div");
        holder.innerHTML = text.trim();
        const fresh = holder.firstElementChild;
        block.replaceWith(fresh);
        const focus = fresh.querySelector("[aria-invalid], .error ~ button, button, summary");
        if (focus) focus.focus();
      });
    }, function () {
      show("Not saved — check the connection and try again", "unsaved");
    });
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
  if (fields.length) document.addEventListener("keydown", function (event) {
    const typing = event.target.matches && event.target.matches("textarea, input[type=text], select");
    if (event.key === "Enter" && (event.ctrlKey || event.metaKey) && submitForm) {
      event.preventDefault();
      submitForm.requestSubmit();
    } else if ((event.key === "n" || event.key === "N") && !typing && !event.ctrlKey && !event.metaKey && !event.altKey) {
      const current = event.target.closest ? event.target.closest("fieldset.attribute") : null;
      // Where the page itself put the focus on opening is already the first without a score.
      const target = current && current === openedAt ? current : nextUnrated(current);
      event.preventDefault();
      if (target) focusField(target);
      else if (submitButton) submitButton.focus();
    } else if (/^[0-9]$/.test(event.key) && !typing && !event.ctrlKey && !event.metaKey && !event.altKey &&
               !(event.target.closest && event.target.closest("fieldset.attribute"))) {
      // A digit with no attribute in focus (after a click on the text, say) scores nothing:
      // say so rather than drop it silently.
      hint.textContent = "Digits score the attribute in focus: press N to go to the next one without a score, then type the digit.";
      hint.hidden = false;
    }
  });

  // Digits work from the moment the page opens: focus starts on the first attribute without a
  // score (unless a refused submit put it on the list of what is missing).
  const hint = document.getElementById("key-hint") || document.createElement("p");
  let openedAt = missing ? null : nextUnrated(null);
  if (openedAt) {
    // Without scrolling when it is the page's first (the user's message stays in view) or on a
    // touch screen (no keys to type).
    const touch = window.matchMedia("(hover: none) and (pointer: coarse)").matches;
    const target = openedAt.querySelector("input:checked") || openedAt.querySelector("input");
    target.focus({ preventScroll: touch || openedAt === fields[0] });
  }
  root.addEventListener("focusin", function (event) {
    if (openedAt && !openedAt.contains(event.target)) openedAt = null;
    if (event.target.closest("fieldset.attribute")) hint.hidden = true;
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
    afterSave = function () {
      if (submitWhenSaved && !dirty.size) {
        submitWhenSaved = false;
        submitForm.requestSubmit();
      }
    };
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
    post(root.dataset.heartbeatUrl, new URLSearchParams()).then(function (response) {
      if (response.status === 401) signedOut(response);
    }, function () {}); // a missed heartbeat only loses a few seconds of active time
  }, 15000);
})();
