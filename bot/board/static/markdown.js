// The agent's Markdown as DOM nodes: paragraphs, headings, lists (nested by indentation), block
// quotes, fenced code with its language (coloured by static/syntax.js when loaded first), tables, rules; inline code, bold, italics, strike-through
// and links. Nothing is ever parsed as HTML: every piece of text becomes a text node, so markup in
// the agent's text is shown literally. A link gets an href only when it is an absolute http(s)
// address (never javascript:, data: or relative), and opens apart (rel=noopener noreferrer).
"use strict";

const MD = (() => {
  const FENCE = /^ {0,3}(`{3,}|~{3,})\s*([\w+#.-]*)/;
  const HEADING = /^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$/;
  const ITEM = /^(\s*)([-*+]|\d{1,9}[.)])\s+(.*)$/;
  const QUOTE = /^ {0,3}> ?(.*)$/;
  const RULE = /^ {0,3}([-*_])(\s*\1){2,}\s*$/;
  const TABLE_RULE = /^\s*\|?\s*:?-+:?\s*(\|\s*:?-+:?\s*)*\|?\s*$/;
  const INLINE = new RegExp([
    /(`+)([^`]|[^`][\s\S]*?[^`])\1(?!`)/.source,  // 1, 2: code
    /\[([^\]\n]+)\]\(([^)\s]+)(?:\s+"[^"\n]*")?\)/.source,  // 3, 4: a link
    /\*\*(?=\S)([^*\n]*?\S)\*\*/.source,  // 5: bold
    /__(?=\S)([^_\n]*?\S)__/.source,  // 6: bold
    /\*(?=[^\s*])([^*\n]*?[^\s*])\*/.source,  // 7: italics (not _x_: snake_case is common)
    /~~(?=\S)([^~\n]*?\S)~~/.source,  // 8: strike-through
    /(https?:\/\/[^\s<>()]*[^\s<>().,;:!?'"])/.source,  // 9: a bare address
  ].join("|"), "g");

  function node(tag, cls, ...children) {
    const made = document.createElement(tag);
    if (cls) made.className = cls;
    for (const child of children) made.append(child);  // strings become text nodes
    return made;
  }

  function safeHref(url) {
    try {
      const parsed = new URL(url);
      return parsed.protocol === "http:" || parsed.protocol === "https:" ? parsed.href : null;
    } catch (e) {
      return null;  // relative or malformed: not a link
    }
  }

  function link(label, url) {
    const href = safeHref(url);
    if (!href) return null;
    const a = node("a", null, ...label);
    a.setAttribute("href", href);
    a.setAttribute("rel", "noopener noreferrer nofollow");
    a.setAttribute("target", "_blank");
    return a;
  }

  function inline(text) {
    const out = [];
    const found = new RegExp(INLINE.source, "g");  // its own: the calls below nest
    let last = 0;
    for (let m; (m = found.exec(text)) !== null;) {
      if (m.index > last) out.push(text.slice(last, m.index));
      last = found.lastIndex;
      let made = null;
      if (m[2] !== undefined) made = node("code", null, m[2]);
      else if (m[3] !== undefined) made = link(inline(m[3]), m[4]);
      else if (m[5] !== undefined || m[6] !== undefined) made = node("strong", null, ...inline(m[5] ?? m[6]));
      else if (m[7] !== undefined) made = node("em", null, ...inline(m[7]));
      else if (m[8] !== undefined) made = node("del", null, ...inline(m[8]));
      else if (m[9] !== undefined) made = link([m[9]], m[9]);
      out.push(made || m[0]);  // a refused link stays its literal text
    }
    if (last < text.length) out.push(text.slice(last));
    return out;
  }

  function cells(line) {
    return line.trim().replace(/^\|/, "").replace(/\|$/, "").split(/(?<!\\)\|/).map((c) => c.trim());
  }

  function startsBlock(line, next) {
    return FENCE.test(line) || HEADING.test(line) || ITEM.test(line) || QUOTE.test(line)
      || RULE.test(line) || (line.includes("|") && next !== undefined && TABLE_RULE.test(next) && next.includes("-"));
  }

  function list(lines, i, out) {
    const first = lines[i].match(ITEM);
    const indent = first[1].length;
    const ordered = /\d/.test(first[2]);
    const box = node(ordered ? "ol" : "ul", "md");
    if (ordered && parseInt(first[2], 10) !== 1) box.setAttribute("start", String(parseInt(first[2], 10)));
    while (i < lines.length) {
      const m = lines[i].match(ITEM);
      if (!m || m[1].length !== indent || /\d/.test(m[2]) !== ordered) break;
      const body = [m[3]];
      i++;
      while (i < lines.length && lines[i].trim() && (lines[i].match(/^\s*/)[0].length > indent)) {
        body.push(lines[i].slice(Math.min(indent + 2, lines[i].match(/^\s*/)[0].length)));
        i++;
      }
      const li = node("li");
      li.append(...blocks(body));
      if (li.firstChild && li.firstChild.tagName === "P") li.firstChild.replaceWith(...li.firstChild.childNodes);
      box.append(li);
      if (i < lines.length && !lines[i].trim() && i + 1 < lines.length && ITEM.test(lines[i + 1])
          && lines[i + 1].match(ITEM)[1].length === indent) i++;  // a loose list's blank line
    }
    out.push(box);
    return i;
  }

  function blocks(lines) {
    const out = [];
    let i = 0;
    while (i < lines.length) {
      const line = lines[i];
      let m;
      if (!line.trim()) { i++; continue; }
      if ((m = line.match(FENCE))) {
        const body = [];
        for (i++; i < lines.length && !lines[i].trimStart().startsWith(m[1]); i++) body.push(lines[i]);
        i++;
        const text = body.join("\n");  // coloured when its language is known (syntax.js)
        const code = node("code", null, typeof SYNTAX === "object" ? SYNTAX.code(text, m[2]) : text);
        const pre = node("pre", "md", code);
        if (m[2]) { code.className = "lang-" + m[2]; pre.dataset.lang = m[2]; }
        out.push(pre);
      } else if ((m = line.match(HEADING))) {
        out.push(node("h" + Math.min(m[1].length + 2, 6), "md", ...inline(m[2])));
        i++;
      } else if (RULE.test(line)) {
        out.push(node("hr", "md"));
        i++;
      } else if (QUOTE.test(line)) {
        const body = [];
        for (; i < lines.length && (m = lines[i].match(QUOTE)); i++) body.push(m[1]);
        out.push(node("blockquote", "md", ...blocks(body)));
      } else if (ITEM.test(line)) {
        i = list(lines, i, out);
      } else if (line.includes("|") && i + 1 < lines.length && TABLE_RULE.test(lines[i + 1]) && lines[i + 1].includes("-")) {
        const head = node("tr", null, ...cells(line).map((c) => node("th", null, ...inline(c))));
        const rows = [];
        for (i += 2; i < lines.length && lines[i].includes("|") && lines[i].trim(); i++) {
          rows.push(node("tr", null, ...cells(lines[i]).map((c) => node("td", null, ...inline(c)))));
        }
        out.push(node("div", "md-table", node("table", "md", node("thead", null, head), node("tbody", null, ...rows))));
      } else {
        const body = [line];
        for (i++; i < lines.length && lines[i].trim() && !startsBlock(lines[i], lines[i + 1]); i++) body.push(lines[i]);
        const p = node("p", "md");
        body.forEach((text, k) => { if (k) p.append(node("br")); p.append(...inline(text)); });
        out.push(p);
      }
    }
    return out;
  }

  /** The Markdown ``text`` as a fragment of DOM nodes (no HTML parsed, ever). */
  function render(text) {
    const fragment = document.createDocumentFragment();
    fragment.append(...blocks(String(text).replace(/\r\n?/g, "\n").split("\n")));
    return fragment;
  }

  return { render, safeHref };
})();
