// Syntax highlighting without HTML: a small tokenizer per language (comments, strings,
// numbers, keywords and literals, keys of JSON/YAML/TOML, Markdown headings) that yields DOM
// nodes — a <span class> per token around a text node, never a parsed string, so whatever the
// code holds is shown literally. The state that spans lines (a block comment, a triple-quoted or
// template string) is carried from one line to the next, per side of a diff. Languages by file
// extension (diffs) or by a fence's name (the agent's code blocks); anything else is plain.
"use strict";

const SYNTAX = (() => {
  const words = (s) => new Set(s.split(" "));
  const C_LIKE = { line: "//", blocks: [["/*", "*/", "com"]], quotes: "\"'" };
  const LANGS = {
    py: { line: "#", blocks: [['"""', '"""', "str"], ["'''", "'''", "str"]], quotes: "\"'",
      kw: words("and as assert async await break class continue def del elif else except finally for from global if import in is lambda nonlocal not or pass raise return try while with yield match case"),
      lit: words("True False None self cls") },
    js: { ...C_LIKE, blocks: [["/*", "*/", "com"], ["`", "`", "str"]],
      kw: words("abstract as async await break case catch class const continue debugger declare default delete do else enum export extends finally for from function get if implements import in instanceof interface let namespace new of private protected public readonly return set static super switch this throw try type typeof var void while with yield"),
      lit: words("true false null undefined NaN Infinity") },
    go: { ...C_LIKE, blocks: [["/*", "*/", "com"], ["`", "`", "str"]],
      kw: words("break case chan const continue default defer else fallthrough for func go goto if import interface map package range return select struct switch type var"),
      lit: words("true false nil iota") },
    rs: { ...C_LIKE, quotes: "\"",
      kw: words("as async await break const continue crate dyn else enum extern fn for if impl in let loop match mod move mut pub ref return static struct super trait type unsafe use where while"),
      lit: words("true false self Self None Some Ok Err") },
    c: { ...C_LIKE, meta: /^\s*#\s*\w+/,
      kw: words("auto break case catch char class const constexpr continue default delete do double else enum explicit extern float for friend goto if inline int long namespace new operator private protected public register return short signed sizeof static struct switch template this throw try typedef typename union unsigned using virtual void volatile while override"),
      lit: words("true false NULL nullptr") },
    java: { ...C_LIKE, meta: /^\s*@\w+/,
      kw: words("abstract assert boolean break byte case catch char class continue default do double else enum extends final finally float for if implements import instanceof int interface long native new package private protected public record return short static super switch synchronized this throw throws transient try var void volatile while"),
      lit: words("true false null") },
    sh: { line: "#", quotes: "\"'", blocks: [],
      kw: words("if then else elif fi for while until do done case esac in function return local export readonly set unset shift exit break continue echo cd source trap sudo"),
      lit: words("true false") },
    json: { quotes: "\"", blocks: [], key: /^(\s*)("(?:[^"\\]|\\.)*")(\s*:)/, lit: words("true false null") },
    yaml: { line: "#", quotes: "\"'", blocks: [], key: /^(\s*(?:-\s+)?)([\w.$/-]+|"[^"]*"|'[^']*')(\s*:(?=\s|$))/,
      meta: /^(---|\.\.\.)\s*$/, lit: words("true false null yes no on off ~") },
    toml: { line: "#", quotes: "\"'", blocks: [['"""', '"""', "str"], ["'''", "'''", "str"]],
      key: /^(\s*)([\w.-]+|"[^"]*")(\s*=)/, meta: /^\s*\[\[?[^\]]*\]\]?\s*$/, lit: words("true false") },
    md: { md: true },
  };
  const NAMES = {
    py: "py", pyi: "py", python: "py", py3: "py",
    js: "js", mjs: "js", cjs: "js", jsx: "js", ts: "js", tsx: "js", mts: "js", javascript: "js", typescript: "js", node: "js",
    go: "go", golang: "go", rs: "rs", rust: "rs",
    sh: "sh", bash: "sh", zsh: "sh", shell: "sh", console: "sh", shellsession: "sh",
    json: "json", jsonc: "json", json5: "json", yaml: "yaml", yml: "yaml", toml: "toml",
    md: "md", markdown: "md", mdx: "md",
    c: "c", h: "c", cc: "c", cpp: "c", cxx: "c", hpp: "c", hh: "c", "c++": "c",
    java: "java", kt: "java", kotlin: "java", scala: "java", cs: "java", csharp: "java",
  };
  const WORD = /[A-Za-z_$][\w$]*/y;
  const LONG = 2000;  // a longer line (minified code, data) is shown plain: quick, whatever comes
  const NUMBER = /(0[xX][\da-fA-F_]+|\d[\d_]*(\.\d+)?([eE][+-]?\d+)?)[a-zA-Z]*/y;

  /** The language of a file name or a fence's name (``null``: none known). */
  function language(name) {
    const base = String(name || "").toLowerCase().split("/").pop();
    if (base === "makefile" || base === "dockerfile" || base.endsWith(".env")) return LANGS.sh;
    const key = base.includes(".") ? base.split(".").pop() : base;
    return LANGS[NAMES[key]] || null;
  }

  function span(cls, text) {
    const made = document.createElement("span");
    made.className = "tok-" + cls;
    made.append(text);  // a text node
    return made;
  }

  // One line of ``lang``: its nodes, and the state the next line starts in (``open``: the end
  // of a block comment or string still open, and its class).
  function line(text, lang, state) {
    const out = [];
    let plain = "";
    const push = (cls, piece) => {
      if (!piece) return;
      if (!cls) { plain += piece; return; }
      if (plain) { out.push(plain); plain = ""; }
      out.push(span(cls, piece));
    };
    let open = state && state.open;
    let i = 0;
    if (text.length > LONG) return finish([text], "", null);
    if (lang.md) return markdown(text, push, out, () => plain);
    if (!open && lang.meta && lang.meta.test(text)) {
      push("meta", text);
      return finish(out, plain, null);
    }
    let m;
    if (!open && lang.key && (m = text.match(lang.key))) {
      const [lead, key, colon] = m.slice(1);  // every language's key: three groups
      push(null, lead);
      push("key", key);
      push(null, colon);
      i = m[0].length;
    }
    while (i < text.length) {
      if (open) {
        const end = text.indexOf(open.end, i);
        if (end < 0) { push(open.cls, text.slice(i)); i = text.length; break; }
        push(open.cls, text.slice(i, end + open.end.length));
        i = end + open.end.length;
        open = null;
        continue;
      }
      const prev = i ? text[i - 1] : " ";
      if (lang.line && text.startsWith(lang.line, i) && (lang.line !== "#" || /\s/.test(prev))) {
        push("com", text.slice(i));
        break;
      }
      const block = (lang.blocks || []).find(([start]) => text.startsWith(start, i));
      if (block) {
        open = { end: block[1], cls: block[2] };
        push(block[2], block[0]);
        i += block[0].length;
        continue;
      }
      const ch = text[i];
      if ((lang.quotes || "").includes(ch)) {
        let j = i + 1;
        while (j < text.length && text[j] !== ch) j += text[j] === "\\" ? 2 : 1;
        push("str", text.slice(i, j + 1));
        i = j + 1;
        continue;
      }
      if (/\d/.test(ch) && !/[\w$]/.test(prev)) {
        NUMBER.lastIndex = i;
        const n = NUMBER.exec(text);
        push("num", n[0]);
        i += n[0].length;
        continue;
      }
      WORD.lastIndex = i;
      const w = /[A-Za-z_$]/.test(ch) ? WORD.exec(text) : null;
      if (w) {
        const cls = lang.kw && lang.kw.has(w[0]) ? "kw" : lang.lit && lang.lit.has(w[0]) ? "lit" : null;
        push(cls, w[0]);
        i += w[0].length;
        continue;
      }
      push(null, ch);
      i++;
    }
    return finish(out, plain, open);
  }

  function finish(out, plain, open) {
    if (plain) out.push(plain);
    return { nodes: out, state: { open } };
  }

  function markdown(text, push, out, rest) {
    if (/^ {0,3}#{1,6}\s/.test(text) || /^ {0,3}(`{3,}|~{3,})/.test(text)) push("meta", text);
    else {
      const item = text.match(/^(\s*)([-*+]|\d+[.)])(\s)/);
      let i = 0;
      if (item) { push(null, item[1]); push("kw", item[2]); i = item[0].length - 1; }
      text.slice(i).split(/(`[^`]*`)/).forEach((part, k) => push(k % 2 ? "str" : null, part));
    }
    const plain = rest();
    return finish(out, plain, null);
  }

  /** ``text`` (a code block) in the colours of the language ``name``s: a fragment. */
  function code(text, name) {
    const lang = language(name);
    const out = document.createDocumentFragment();
    if (!lang) { out.append(String(text)); return out; }
    let state = null;
    String(text).split("\n").forEach((row, k) => {
      if (k) out.append("\n");
      const done = line(row, lang, state);
      for (const n of done.nodes) out.append(n);
      state = done.state;
    });
    return out;
  }

  /** A file's patch as a fragment: each line a block (added, removed, hunk header, context) whose
   * code is coloured in the language of ``path``; the old and the new side keep their own
   * state across lines, and a hunk header starts both afresh. */
  function diff(patch, path) {
    const lang = language(path);
    const out = document.createDocumentFragment();
    let old = null, now = null, body = false;
    for (const row of String(patch).split("\n")) {
      const head = row.startsWith("@@");
      body = body || head;
      const kind = head ? "hunk" : !body ? "head" : row[0] === "+" ? "add" : row[0] === "-" ? "del" : null;
      const block = document.createElement("span");
      block.className = kind ? "line " + kind : "line";
      if (head) { old = now = null; }
      if (!lang || head || !body || row.startsWith("\\")) block.append(row);
      else {
        block.append(row.slice(0, 1));
        const done = line(row.slice(1), lang, kind === "del" ? old : now);
        for (const n of done.nodes) block.append(n);
        if (kind === "del") old = done.state;
        else if (kind === "add") now = done.state;
        else old = now = done.state;
      }
      block.append("\n");
      out.append(block);
    }
    return out;
  }

  return { language, code, diff };
})();
