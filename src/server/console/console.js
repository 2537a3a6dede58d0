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

  // An instant (ms since the epoch) as the window fields take it: RFC 3339, UTC.
  function instant(ms) {
    return new Date(ms).toISOString().replace(".000Z", "Z");
  }
  function bytes(n) {
    var units = ["B", "kB", "MB", "GB", "TB"], u = 0;
    while (n >= 1000 && u < units.length - 1) { n /= 1000; u++; }
    return (u === 0 ? n : n.toFixed(1)) + " " + units[u];
  }

  // The selection's download: its size counted by the server first (/selection), then,
  // when it is small enough to hold, fetched here with its progress shown and saved; a
  // larger one is left to the browser's own download.
  var IN_PAGE_MAX = 1 << 30;
  var link = document.querySelector("a[data-size-url]");
  if (link) {
    var sizeEl = document.querySelector("[data-testid=download-size]");
    var bar = document.querySelector("[data-testid=download-progress]");
    var state = document.querySelector("[data-testid=download-status]");
    var total = null;
    fetch(link.dataset.sizeUrl, { credentials: "same-origin" })
      .then(function (r) {
        return r.json().then(function (j) {
          if (!r.ok) throw new Error(j.error || ("HTTP " + r.status));
          return j;
        });
      })
      .then(function (j) {
        total = j.file_bytes;
        var t = j.packets + " packets, a pcapng file of " + j.file + " (" + j.file_bytes + " bytes)";
        if (j.over_limit) t += "; over this server's limit of " + bytes(j.limit_bytes) + " per query: narrow the window or filter";
        if (j.partial) t += "; partial: " + j.partial;
        sizeEl.textContent = t;
        sizeEl.dataset.bytes = String(j.file_bytes);
      })
      .catch(function (e) { sizeEl.textContent = "size unknown: " + e.message; });
    link.addEventListener("click", function (ev) {
      if (total === null || total > IN_PAGE_MAX || !window.ReadableStream) return;
      ev.preventDefault();
      var got = 0, parts = [];
      bar.hidden = false; bar.max = Math.max(total, 1); bar.value = 0;
      state.textContent = "downloading…";
      fetch(link.href, { credentials: "same-origin" }).then(function (r) {
        if (!r.ok) {
          return r.json().then(function (j) { throw new Error(j.error || ("HTTP " + r.status)); },
                              function () { throw new Error("HTTP " + r.status); });
        }
        var reader = r.body.getReader();
        function next() {
          return reader.read().then(function (x) {
            if (x.done) return;
            parts.push(x.value);
            got += x.value.length;
            bar.value = got;
            state.textContent = bytes(got) + " of " + bytes(total);
            return next();
          });
        }
        return next();
      }).then(function () {
        var url = URL.createObjectURL(new Blob(parts, { type: "application/x-pcapng" }));
        var a = document.createElement("a");
        a.href = url;
        a.download = link.getAttribute("download") || "capsule-selection.pcapng";
        document.body.appendChild(a);
        a.click();
        a.remove();
        state.textContent = "done: " + got + " bytes";
        state.dataset.bytes = String(got);
        setTimeout(function () { URL.revokeObjectURL(url); }, 60000);
      }).catch(function (e) {
        state.textContent = "the download failed: " + e.message + " (" + got + " bytes received)";
      });
    });
  }

  // The timeline: a drag across the chart selects a window (from/to in the URL, which the
  // other views' links keep), snapped to the chart's bins.
  var svg = document.querySelector("svg[data-step-ms]");
  if (!svg) return;
  var from = Number(svg.dataset.startMs), to = Number(svg.dataset.endMs);
  var step = Math.max(Number(svg.dataset.stepMs), 1);
  var left = Number(svg.dataset.left), width = Number(svg.dataset.width);
  var brush = svg.querySelector(".brush");
  var start = null, dragged = false;
  function x(ev) {
    var pt = svg.createSVGPoint();
    pt.x = ev.clientX; pt.y = ev.clientY;
    var p = pt.matrixTransform(svg.getScreenCTM().inverse());
    return Math.min(Math.max(p.x, left), left + width);
  }
  function ms(px) { return from + (px - left) / width * (to - from); }
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
    var lo = from + Math.floor((ms(a) - from) / step) * step;
    var hi = Math.max(from + Math.ceil((ms(b) - from) / step) * step, lo + step);
    var q = new URLSearchParams(location.search);
    q.set("from", instant(lo));
    q.set("to", instant(hi));
    location.search = q.toString();
  });
  // A drag is not a click on the bin under its end.
  svg.addEventListener("click", function (ev) { if (dragged) { ev.preventDefault(); dragged = false; } }, true);
})();
