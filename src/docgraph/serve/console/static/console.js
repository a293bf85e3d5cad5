// docgraph console: the little script there is (served by docgraph; the pages work without it).
"use strict";
document.addEventListener("DOMContentLoaded", function () {
  // Removals ask first.
  document.querySelectorAll("form[data-confirm]").forEach(function (form) {
    form.addEventListener("submit", function (event) {
      if (!window.confirm(form.getAttribute("data-confirm"))) { event.preventDefault(); }
    });
  });
  // Share bars (their numbers are always printed beside them).
  document.querySelectorAll(".bar-fill[data-width]").forEach(function (bar) {
    var width = parseFloat(bar.getAttribute("data-width"));
    if (!isNaN(width)) { bar.style.width = Math.max(0, Math.min(100, width)) + "%"; }
  });
  // While a console refresh or re-index runs, its page reloads itself every few seconds.
  if (document.querySelector("[data-running='yes']")) {
    window.setTimeout(function () {
      window.location.assign(window.location.pathname + window.location.search);  // a GET
    }, 3000);
  }
});
