// The runs console's only script: the pages work without it. It asks before a cancel, shows a state's source
// when the graph is pointed at, marks in the graph the state a wait (or a point's row) stands for, and switches the
// graph between fitting its box and full size. Text from the page's data goes in with textContent only.
(function () {
  "use strict";

  document.querySelectorAll("form[data-confirm]").forEach(function (form) {
    form.addEventListener("submit", function (event) {
      if (!window.confirm(form.dataset.confirm)) event.preventDefault();
    });
  });

  const graph = document.querySelector("[data-graph]");
  if (!graph) return;

  const data = document.getElementById("states");
  const states = data ? JSON.parse(data.textContent) : {};
  const panel = document.getElementById("state-panel");

  function add(parent, tag, text, className) {
    const element = document.createElement(tag);
    if (text !== undefined) element.textContent = text;
    if (className) element.className = className;
    parent.appendChild(element);
    return element;
  }

  function show(id) {
    const state = states[id];
    if (!state || !panel) return;
    panel.replaceChildren();
    add(panel, "h3", state.title + (state.function ? "  ·  " + state.function + "()" : ""));
    if (state.source) add(panel, "pre", state.source);
    if (state.live && state.live.length) add(panel, "p", "A snapshot here carries: " + state.live.join(", "));
    if (state.visits && state.visits.length) add(panel, "p", "Waited here at #" + state.visits.join(", #"), "muted");
    (state.answers || []).slice(0, 6).forEach(function (answer) { add(panel, "p", answer, "small"); });
  }

  graph.querySelectorAll("g.node").forEach(function (node) {
    node.addEventListener("mouseenter", function () { show(node.id); });
    node.addEventListener("click", function () { show(node.id); });
  });

  function mark(id, on) {
    const node = id ? document.getElementById(id) : null;
    if (node && graph.contains(node)) node.classList.toggle("highlight", on);
  }
  document.querySelectorAll("[data-node]").forEach(function (item) {
    const id = item.dataset.node;
    ["mouseenter", "focus"].forEach(function (name) {
      item.addEventListener(name, function () { mark(id, true); show(id); });
    });
    ["mouseleave", "blur"].forEach(function (name) {
      item.addEventListener(name, function () { mark(id, false); });
    });
  });

  const size = document.querySelector("[data-graph-size]");
  if (size) {
    size.addEventListener("click", function () {
      const full = graph.classList.toggle("full");
      size.setAttribute("aria-pressed", String(full));
      size.textContent = full ? "Fit to box" : "Full size";
    });
  }
})();
