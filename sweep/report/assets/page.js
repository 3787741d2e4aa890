// The report page's behaviour (sweep/report/page.py): sort the job table by any column,
// filter it by status and by factor level, and draw the plotly figures. No network: the
// only other script is plotly.min.js beside the page.
(function () {
  "use strict";
  var table = document.querySelector("table.jobs");
  var shown = document.getElementById("shown");

  function cellValue(row, index) {
    var cell = row.cells[index];
    var v = cell.getAttribute("data-v");
    if (v === null) { v = cell.textContent; }
    var n = parseFloat(v);
    return (v !== "" && isFinite(n) && String(n) !== "NaN" && /^[-+0-9.eE]+$/.test(v.trim())) ? n : v.toLowerCase();
  }

  function sortBy(th) {
    var index = Array.prototype.indexOf.call(th.parentNode.children, th);
    var ascending = th.getAttribute("aria-sort") !== "ascending";
    Array.prototype.forEach.call(th.parentNode.children, function (h) { h.removeAttribute("aria-sort"); });
    th.setAttribute("aria-sort", ascending ? "ascending" : "descending");
    var body = table.tBodies[0];
    var rows = Array.prototype.slice.call(body.rows);
    rows.sort(function (a, b) {
      var x = cellValue(a, index), y = cellValue(b, index);
      var empty = (x === "") - (y === "");  // empty cells last, whatever the direction
      if (empty) { return empty; }
      if (typeof x === typeof y) { return (x < y ? -1 : x > y ? 1 : 0) * (ascending ? 1 : -1); }
      return (typeof x === "number" ? -1 : 1);
    });
    rows.forEach(function (r) { body.appendChild(r); });
  }

  function applyFilters() {
    var selects = document.querySelectorAll("select.filter");
    var rows = table.tBodies[0].rows;
    var visible = {};
    var count = 0;
    Array.prototype.forEach.call(rows, function (row) {
      var keep = true;
      Array.prototype.forEach.call(selects, function (s) {
        if (s.value !== "" && row.getAttribute("data-" + s.getAttribute("data-key")) !== s.value) { keep = false; }
      });
      row.style.display = keep ? "" : "none";
      visible[row.getAttribute("data-job")] = keep;
      if (keep) { count += 1; }
    });
    if (shown) { shown.textContent = count + " of " + rows.length + " jobs shown"; }
    var curves = document.querySelector(".chart[data-figure='curves']");
    if (curves && curves.data && window.Plotly) {  // the curves follow the filter
      var vis = curves.data.map(function (t) {
        if (t.meta === undefined || t.legendgroup === "old") { return t.visible === undefined ? true : t.visible; }
        return visible[String(t.meta)] === false ? false : true;
      });
      window.Plotly.restyle(curves, {visible: vis});
    }
  }

  if (table) {
    Array.prototype.forEach.call(table.tHead.rows[0].cells, function (th) {
      th.addEventListener("click", function () { sortBy(th); });
    });
    Array.prototype.forEach.call(document.querySelectorAll("select.filter"), function (s) {
      s.addEventListener("change", applyFilters);
    });
  }

  // A chart narrower than this (a phone) gets its figure's narrow patch (sweep/report/charts.py,
  // narrow_patch: no title, the legend below or none, side-by-side panels stacked).
  var NARROW_PX = 600;

  function merge(base, patch) {
    if (!patch || typeof patch !== "object" || Array.isArray(patch) ||
        !base || typeof base !== "object" || Array.isArray(base)) { return patch === undefined ? base : patch; }
    var out = {};
    Object.keys(base).forEach(function (k) { out[k] = base[k]; });
    Object.keys(patch).forEach(function (k) { out[k] = merge(base[k], patch[k]); });
    return out;
  }

  var specs = document.getElementById("figures");
  if (specs) {
    var figures = JSON.parse(specs.textContent);
    Array.prototype.forEach.call(document.querySelectorAll(".chart[data-figure]"), function (div) {
      var spec = figures[div.getAttribute("data-figure")];
      if (!spec) { return; }
      if (!window.Plotly) {
        div.innerHTML = "<p class='nojs'>The interactive chart needs plotly.min.js beside this page " +
          "(it is written with it); the static PNGs are under plots/.</p>";
        return;
      }
      var data = spec.data, layout = spec.layout;
      if (spec.narrow && div.clientWidth < NARROW_PX) {
        data = data.map(function (t, i) { return merge(t, (spec.narrow.data || [])[i] || {}); });
        layout = merge(layout, spec.narrow.layout);
      }
      div.innerHTML = "";
      window.Plotly.newPlot(div, data, layout, {displaylogo: false, responsive: true});
    });
  }
  if (table) { applyFilters(); }
}());
