// capsule console: compiled into the binary (src/server/console/); talks to this origin only.
"use strict";
(function () {
  // Copy buttons: the command line in the <code> before them.
  document.querySelectorAll("button.copy").forEach(function (b) {
    b.addEventListener("click", function () {
      var code = b.parentElement.querySelector("code");
      if (!code) return;
      var done = function () { b.textContent = "Copied"; };
      if (navigator.clipboard) {
        navigator.clipboard.writeText(code.textContent).then(done, function () {});
      }
    });
  });
  // The timeline: a drag across the chart selects a window (from/to in the URL, which the
  // other views' links keep).
  var svg = document.querySelector("svg.chart");
  if (!svg) return;
  var from = Number(svg.dataset.from), to = Number(svg.dataset.to);
  var left = Number(svg.dataset.left), width = Number(svg.dataset.width);
  var brush = svg.querySelector(".brush");
  var start = null, dragged = false;
  function x(ev) {
    var pt = svg.createSVGPoint();
    pt.x = ev.clientX; pt.y = ev.clientY;
    var p = pt.matrixTransform(svg.getScreenCTM().inverse());
    return Math.min(Math.max(p.x, left), left + width);
  }
  function second(px) { return from + (px - left) / width * (to - from); }
  svg.addEventListener("mousedown", function (ev) { start = x(ev); dragged = false; ev.preventDefault(); });
  svg.addEventListener("mousemove", function (ev) {
    if (start === null) return;
    var now = x(ev);
    if (Math.abs(now - start) > 3) dragged = true;
    brush.setAttribute("x", Math.min(start, now));
    brush.setAttribute("width", Math.abs(now - start));
  });
  svg.addEventListener("mouseup", function (ev) {
    if (start === null) return;
    var end = x(ev), a = Math.min(start, end), b = Math.max(start, end);
    start = null;
    if (!dragged) return;
    var q = new URLSearchParams(location.search);
    q.set("from", Math.floor(second(a)).toString());
    q.set("to", Math.max(Math.ceil(second(b)), Math.floor(second(a)) + 1).toString());
    location.search = q.toString();
  });
  // A drag is not a click on the bar under its end.
  svg.addEventListener("click", function (ev) { if (dragged) { ev.preventDefault(); dragged = false; } }, true);
})();
