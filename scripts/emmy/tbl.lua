-- emmy.tbl — aligned text tables: tbl.render{ header = {…}, rows = {{…}, …}, align = "lrr…" } -> string.
local M = {}

local function width(s) -- display width of UTF-8 text
  local _, n = tostring(s):gsub("[^\128-\191]", "")
  return n
end

local function pad(s, w, right)
  s = tostring(s)
  local gap = w - width(s)
  if gap <= 0 then return s end
  return right and (" "):rep(gap) .. s or s .. (" "):rep(gap)
end

function M.render(t)
  local header, rows, align = t.header, t.rows, t.align or ""
  local ncol = #header
  local w = {}
  for c = 1, ncol do w[c] = width(header[c]) end
  for _, r in ipairs(rows) do
    for c = 1, ncol do w[c] = math.max(w[c], width(r[c] == nil and "" or r[c])) end
  end
  local lines = {}
  local function line(cells)
    local parts = {}
    for c = 1, ncol do
      local v = cells[c] == nil and "" or cells[c]
      parts[c] = pad(v, w[c], align:sub(c, c) == "r")
    end
    lines[#lines + 1] = (t.indent or "") .. table.concat(parts, "  "):gsub("%s+$", "")
  end
  line(header)
  local rule = {}
  for c = 1, ncol do rule[c] = ("-"):rep(w[c]) end
  lines[#lines + 1] = (t.indent or "") .. table.concat(rule, "  ")
  for _, r in ipairs(rows) do line(r) end
  return table.concat(lines, "\n")
end

function M.print(t) print(M.render(t)) end

return M
