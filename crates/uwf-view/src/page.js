(function () {
  "use strict";
  function stepsOf(node) {
    var thread = node.closest(".thread");
    var role = node.getAttribute("data-role");
    return Array.prototype.filter.call(thread.querySelectorAll(".card[data-role]"), function (c) {
      return c.closest(".thread") === thread && c.getAttribute("data-role") === role;
    });
  }
  document.querySelectorAll("svg.graph .node[data-role]").forEach(function (node) {
    function go() {
      var found = stepsOf(node);
      document.querySelectorAll(".step.hl").forEach(function (c) { c.classList.remove("hl"); });
      found.forEach(function (c) { c.classList.add("hl"); if (c.tagName === "DETAILS") { c.open = true; } });
      if (found.length) { found[0].scrollIntoView({ behavior: "smooth", block: "start" }); }
    }
    node.addEventListener("click", go);
    node.addEventListener("keydown", function (e) { if (e.key === "Enter") { go(); } });
  });
  document.querySelectorAll(".tools button[data-act]").forEach(function (b) {
    b.addEventListener("click", function () {
      var open = b.getAttribute("data-act") === "open";
      document.querySelectorAll("details").forEach(function (d) { d.open = open; });
    });
  });
})();
