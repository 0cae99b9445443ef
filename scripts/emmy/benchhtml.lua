-- emmy.benchhtml — kernels.html of a bench dump: one self-contained page (no network, no external file) with the
-- whole-graph table and the per-kernel table (click a header to sort), and per kernel its knobs, gate verdicts,
-- CUDA source and reproducer in folding sections.
local M = {}

local function esc(s)
  return (tostring(s or ""):gsub("[&<>\"]", { ["&"] = "&amp;", ["<"] = "&lt;", [">"] = "&gt;", ['"'] = "&quot;" }))
end
local function num(x, f) return x and (f or "%.1f"):format(x) or "" end

local STYLE = [[
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#222}
table{border-collapse:collapse;margin:.5em 0 1.5em}
th,td{border:1px solid #ccc;padding:.2em .5em;text-align:right}
th{background:#eee;cursor:pointer;user-select:none}
td.l,th.l{text-align:left}
tr.flag td{background:#fff3e0}
pre{background:#f6f6f6;padding:.6em;overflow:auto;max-height:30em;font-size:12px}
details{margin:.3em 0}
summary{cursor:pointer;font-family:monospace}
.note{color:#a40}
]]

-- Sorting: a click on a header sorts its table's body by that column (numbers as numbers), again to reverse.
local SCRIPT = [[
document.querySelectorAll('table.sortable').forEach(function (t) {
  t.querySelectorAll('th').forEach(function (th, col) {
    th.addEventListener('click', function () {
      var body = t.tBodies[0], rows = Array.prototype.slice.call(body.rows);
      var dir = th.getAttribute('data-dir') === 'asc' ? -1 : 1;
      rows.sort(function (a, b) {
        var x = a.cells[col].getAttribute('data-v') || a.cells[col].textContent;
        var y = b.cells[col].getAttribute('data-v') || b.cells[col].textContent;
        var nx = parseFloat(x), ny = parseFloat(y);
        if (!isNaN(nx) && !isNaN(ny)) return dir * (nx - ny);
        return dir * x.localeCompare(y);
      });
      rows.forEach(function (r) { body.appendChild(r); });
      th.setAttribute('data-dir', dir === 1 ? 'asc' : 'desc');
    });
  });
});
// (a test opens the page with #selftest: the per-kernel table sorted by emmy µs, largest first, and its first
// kernel recorded on the body, so a headless browser's DOM dump shows that the script ran and sorted)
if (location.hash === '#selftest') {
  var th = document.querySelector('#kernels th:nth-child(4)');
  th.click(); th.click();
  var first = document.querySelector('#kernels tbody tr td');
  document.body.setAttribute('data-first', first ? first.textContent : '');
}
document.body.setAttribute('data-ready', '1');
]]

local function cell(v, left, sortv)
  return ("<td%s%s>%s</td>"):format(left and ' class="l"' or "", sortv and (' data-v="%s"'):format(esc(sortv)) or "", esc(v))
end

-- res: emmy.bench's result; extra: {sources = name -> CUDA text, repros = name -> JSON text,
-- verdicts = name -> {{rule, family, ok, reason, file, line}}}.
function M.page(res, extra)
  local h = {}
  local function add(s) h[#h + 1] = s end
  add("<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>emmy bench — " .. esc(res.device) .. "</title>")
  add("<style>" .. STYLE .. "</style></head><body>")
  add(("<h1>emmy bench</h1><p>benched at %s on %s; %s</p>"):format(esc(res.at), esc(res.device), esc(res.regime)))
  add("<h2>Whole graph</h2><p>speedup vs eager: above 1 is faster than eager</p>")
  add('<table class="sortable" id="whole"><thead><tr><th class="l">backend</th><th>µs</th><th>p20</th><th>p80</th><th>vs eager</th><th class="l">clock</th></tr></thead><tbody>')
  for _, w in ipairs(res.whole) do
    local s = w.stats or {}
    local clock = s.clock and ("%.0f → %.0f MHz%s"):format(s.clock.before_mhz, s.clock.after_mhz, s.clock.drift and " (drift)" or "") or ""
    add("<tr>" .. cell(w.backend, true) .. cell(num(s.median_us)) .. cell(num(s.p20_us)) .. cell(num(s.p80_us))
      .. cell(w.speedup_vs_eager and ("%.2f×"):format(w.speedup_vs_eager) or "", false, w.speedup_vs_eager) .. cell(clock, true) .. "</tr>")
  end
  add("</tbody></table>")
  if res.by_kind then
    add("<h2>Where the whole graph's time goes</h2><p>kernel durations of one call by kind, µs (torch: torch.profiler; emmy: CUPTI); launch gaps not counted</p>")
    local hd = '<table class="sortable" id="bykind"><thead><tr><th class="l">kind</th>'
    for _, b in ipairs(res.by_kind.backends) do hd = hd .. ("<th>%s µs</th><th>kernels</th>"):format(esc(b)) end
    add(hd .. "</tr></thead><tbody>")
    for _, r in ipairs(res.by_kind.rows) do
      local row = "<tr>" .. cell(r.kind, true)
      for _, b in ipairs(res.by_kind.backends) do row = row .. cell(num(r[b].us)) .. cell(("%g"):format(r[b].n)) end
      add(row .. "</tr>")
    end
    add("</tbody></table>")
  end
  add("<h2>Per kernel</h2><p>emmy µs: the reproducer alone; in program: from the whole-graph replay (CUPTI); vs torch: torch's best / emmy, above 1 is emmy faster; cum: cumulative share of emmy's time</p>")
  add('<table class="sortable" id="kernels"><thead><tr><th class="l">kernel</th><th class="l">layer op</th><th class="l">coverage</th><th>emmy µs</th><th>p20-p80</th><th>in program µs</th><th>eager µs</th><th>tcompile µs</th><th>vs torch</th><th>cum</th><th class="l">accuracy</th></tr></thead><tbody>')
  for _, k in ipairs(res.kernels) do
    local e = k.emmy and k.emmy.median_us
    local bt
    for _, b in ipairs { "eager", "tcompile" } do if k[b] and (not bt or k[b].median_us < bt) then bt = k[b].median_us end end
    local ratio = e and bt and bt / e or nil
    local flagged = (k.accuracy ~= "ok" and k.accuracy ~= "ok (alone)") or (k.emmy and k.emmy.clock and k.emmy.clock.drift)
    add(("<tr%s>"):format(flagged and ' class="flag"' or "") .. cell(k.name, true) .. cell(k.layer_op, true) .. cell(k.coverage, true)
      .. cell(num(e)) .. cell(k.emmy and ("%.1f-%.1f"):format(k.emmy.p20_us, k.emmy.p80_us) or "", false, k.emmy and k.emmy.p20_us)
      .. cell(num(k.in_program_us)) .. cell(num(k.eager and k.eager.median_us)) .. cell(num(k.tcompile and k.tcompile.median_us))
      .. cell(ratio and ("%.2f×"):format(ratio) or "", false, ratio) .. cell(k.cum_share and ("%.0f%%"):format(100 * k.cum_share) or "", false, k.cum_share)
      .. cell(k.accuracy, true) .. "</tr>")
  end
  add("</tbody></table>")
  for _, n in ipairs(res.notes or {}) do add('<p class="note">note: ' .. esc(n) .. "</p>") end
  add("<h2>Kernels</h2>")
  for _, k in ipairs(res.kernels) do
    add(("<details><summary>%s — %s</summary>"):format(esc(k.name), esc(k.layer_op)))
    add("<p>knobs: <code>" .. esc(k.knobs or "-") .. "</code></p>")
    local vs = extra.verdicts and extra.verdicts[k.name]
    if vs and #vs > 0 then
      add('<table><thead><tr><th class="l">gate</th><th class="l">family</th><th class="l">verdict</th><th class="l">reason</th><th class="l">where</th></tr></thead><tbody>')
      for _, v in ipairs(vs) do
        add("<tr>" .. cell(v.rule, true) .. cell(v.family, true) .. cell(v.ok and "ok" or "REFUSED", true) .. cell(v.reason, true)
          .. cell(("%s:%s"):format(v.file or "?", v.line or "?"), true) .. "</tr>")
      end
      add("</tbody></table>")
    end
    local src = extra.sources and extra.sources[k.name]
    if src then add("<details><summary>CUDA source</summary><pre>" .. esc(src) .. "</pre></details>") end
    local repro = extra.repros and extra.repros[k.name]
    if repro then add("<details><summary>reproducer (.torch.json)</summary><pre>" .. esc(repro) .. "</pre></details>") end
    add("</details>")
  end
  add("<script>" .. SCRIPT .. "</script></body></html>\n")
  return table.concat(h, "\n")
end

return M
