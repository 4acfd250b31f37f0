// The attention view of aiayn's pages, plain JS and SVG, nothing loaded from elsewhere.
// In the style of the paper's Figures 3-5: the query pieces on the left, the key pieces on
// the right, one line per (head, query, key) weighted by attention, one colour per head.
// A click on a piece shows only its lines and a table of its weights. Below, a grid of
// small heat maps, layers x heads; a click on a cell picks that layer, head and query.
//
// data (attention_view.to_json): {source: [piece], target: [piece],
//   encoder|decoder|cross: [layer][head][query][key], readable_layer: {kind: layer}}
// AttentionView.mount(element, data) draws it, on each kind's most readable layer; the
// state it returns has pick(kind, layer, head), which shows that one head (as the
// service's page does when a head of its grid is clicked).
"use strict";

const AttentionView = (() => {
  const SVG = "http://www.w3.org/2000/svg";
  const KINDS = {
    encoder: "encoder self-attention",
    decoder: "decoder self-attention",
    cross: "encoder-decoder attention",
  };
  const SHIFTED = "the decoder's inputs: ⟨start⟩, then the translation, shifted right by one " +
    "(the row of a piece is the position that predicts the piece after it)";
  const NOTES = {
    encoder: "Left: each source piece; right: the source pieces it attends to.",
    decoder: `Left and right: ${SHIFTED}. A position sees itself and those before it only.`,
    cross: `Left: ${SHIFTED}. Right: the source pieces it attends to.`,
  };
  const ROW = 22; // pixels per piece
  const MAX_WIDTH = 520;

  // Sentencepiece pieces as people read them: the "▁" (U+2581) that starts a word is not
  // shown (alone, it is "␣"), a piece that continues a word follows a hyphen ("Kind", "-er")
  // unless it is punctuation or a special piece ("<unk>"), and a byte piece of an ASCII
  // character (byte fallback: "<0x44>") is that character; "<s>" and "</s>" are the
  // decoder's start and the end.
  function labels(pieces) {
    return pieces.map((piece, i) => {
      if (piece === "<s>") return "⟨start⟩";
      if (piece === "</s>") return "⟨end⟩";
      if (piece.startsWith("\u2581")) return piece.slice(1) || "␣";
      const byte = /^<0x([0-9A-F]{2})>$/.exec(piece);
      const text = byte && parseInt(byte[1], 16) < 0x80 ? String.fromCharCode(parseInt(byte[1], 16)) : piece;
      const starts = i === 0 || ["<s>", "\u2581"].includes(pieces[i - 1]);
      return starts || /^([\p{P}\p{S}]+|<.+>)$/u.test(text) ? text : `-${text}`;
    });
  }

  function headColour(head, heads) {
    return `hsl(${Math.round((360 * head) / heads)}, 70%, 42%)`;
  }

  function node(name, attrs = {}, text = null, ns = null) {
    const el = ns ? document.createElementNS(ns, name) : document.createElement(name);
    for (const [key, value] of Object.entries(attrs)) el.setAttribute(key, value);
    if (text !== null) el.textContent = text;
    return el;
  }
  const svgNode = (name, attrs, text = null) => node(name, attrs, text, SVG);

  // (query pieces, key pieces) of a kind: queries attend to keys.
  function tokens(data, kind) {
    const queries = kind === "encoder" ? data.source : data.target;
    return [queries, kind === "decoder" ? data.target : data.source];
  }

  function shownHeads(state, heads) {
    return state.head === "all" ? [...Array(heads).keys()] : [Number(state.head)];
  }

  // The lines of one layer: every head, or one; only those touching `focus` when given.
  // A weight of exactly 0 (a masked position) draws nothing.
  function drawLines(svg, data, state) {
    svg.replaceChildren();
    const [left, right] = tokens(data, state.kind);
    const weights = data[state.kind][state.layer]; // [head][query][key]
    const height = ROW * (Math.max(left.length, right.length) + 1);
    const width = state.width, leftX = Math.round(width * 0.3), rightX = width - leftX;
    for (const [key, value] of Object.entries({ width, height, viewBox: `0 0 ${width} ${height}` })) {
      svg.setAttribute(key, value);
    }
    for (const h of shownHeads(state, weights.length)) {
      weights[h].forEach((row, i) => {
        row.forEach((w, j) => {
          if (w <= 0) return;
          if (state.focus && state.focus.side === "left" && state.focus.index !== i) return;
          if (state.focus && state.focus.side === "right" && state.focus.index !== j) return;
          svg.appendChild(svgNode("line", {
            class: "attn-line", x1: leftX + 6, y1: ROW * (i + 1) - 5, x2: rightX - 6,
            y2: ROW * (j + 1) - 5, stroke: headColour(h, weights.length), "stroke-width": 2,
            "stroke-opacity": Math.min(1, w * (state.focus ? 1.5 : 1)),
            "data-head": h, "data-weight": w,
          }));
        });
      });
    }
    const columns = [[left, "left", leftX, "end"], [right, "right", rightX, "start"]];
    for (const [pieces, side, x, anchor] of columns) {
      labels(pieces).forEach((piece, index) => {
        const text = svgNode("text", {
          class: "tok", x, y: ROW * (index + 1), "text-anchor": anchor,
          "data-side": side, "data-index": index,
        }, piece);
        const focused = state.focus && state.focus.side === side && state.focus.index === index;
        if (focused) text.classList.add("focused");
        text.addEventListener("click", () => {
          state.focus = focused ? null : { side, index };
          state.picked = null;
          state.redraw();
        });
        svg.appendChild(text);
      });
    }
  }

  // The weights of the focused piece, one column per head shown: for a query (left), what
  // it gives each key; for a key (right), what each query gives it.
  function drawTable(box, data, state) {
    box.replaceChildren();
    if (!state.focus) return;
    const [left, right] = tokens(data, state.kind);
    const weights = data[state.kind][state.layer]; // [head][query][key]
    const { side, index } = state.focus;
    const [own, others] = (side === "left" ? [left, right] : [right, left]).map(labels);
    const weight = (h, k) => (side === "left" ? weights[h][index][k] : weights[h][k][index]);
    const heads = shownHeads(state, weights.length);
    const table = node("table", { class: "weights" });
    const what = side === "left" ? "gives each piece" : "is given by each piece";
    table.appendChild(node("caption", {}, `Layer ${state.layer + 1}: “${own[index]}” ${what}`));
    const head = node("tr");
    head.appendChild(node("th"));
    for (const h of heads) {
      head.appendChild(node("th", { style: `color: ${headColour(h, weights.length)}` }, `head ${h + 1}`));
    }
    table.appendChild(head);
    others.forEach((piece, k) => {
      const row = node("tr", { "data-index": k });
      if (k === state.picked) row.classList.add("picked");
      row.appendChild(node("th", {}, piece));
      for (const h of heads) {
        row.appendChild(node("td", { "data-head": h, "data-index": k }, weight(h, k).toFixed(4)));
      }
      table.appendChild(row);
    });
    box.appendChild(table);
  }

  // One small heat map per (layer, head) of the chosen kind, a layer's maps on one line of
  // the view's width (at most 90 pixels each); a cell is (query, key).
  function drawGrid(grid, data, state) {
    grid.replaceChildren();
    const layers = data[state.kind];
    const side = Math.min(90, Math.floor((state.width - 80) / layers[0].length) - 8);
    const cell = Math.max(2, Math.floor(side / Math.max(...tokens(data, state.kind).map((t) => t.length))));
    layers.forEach((heads, layer) => {
      const row = node("div", { class: "grid-row" });
      const star = layer === data.readable_layer?.[state.kind] ? " ★" : "";
      row.appendChild(node("span", { class: "grid-label" }, `layer ${layer + 1}${star}`));
      heads.forEach((matrix, head) => {
        const svg = svgNode("svg", {
          class: "heat", width: cell * matrix[0].length, height: cell * matrix.length,
          "data-layer": layer, "data-head": head,
        });
        svg.appendChild(svgNode("title", {}, `layer ${layer + 1}, head ${head + 1}`));
        matrix.forEach((weights, i) => weights.forEach((w, j) => {
          svg.appendChild(svgNode("rect", {
            x: j * cell, y: i * cell, width: cell, height: cell, "data-query": i, "data-key": j,
            fill: headColour(head, heads.length), "fill-opacity": w,
          }));
        }));
        if (layer === state.layer && String(head) === String(state.head)) svg.classList.add("picked");
        svg.addEventListener("click", (event) => {
          const rect = event.target.closest("rect");
          Object.assign(state, { layer, head: String(head) });
          if (rect) {
            state.focus = { side: "left", index: Number(rect.dataset.query) };
            state.picked = Number(rect.dataset.key);
          }
          state.redraw();
        });
        row.appendChild(svg);
      });
      grid.appendChild(row);
    });
  }

  // The heads' colours (a click shows that head alone) and what each side of the lines is.
  function drawLegend(box, data, state) {
    box.replaceChildren();
    const heads = data[state.kind][0].length;
    const keys = node("div", { class: "heads" });
    for (let h = 0; h < heads; h++) {
      const item = node("button", { type: "button", class: "head-key", "data-head": h });
      item.appendChild(node("span", { class: "swatch", style: `background: ${headColour(h, heads)}` }));
      item.append(`head ${h + 1}`);
      item.addEventListener("click", () => {
        state.head = state.head === String(h) ? "all" : String(h);
        state.redraw();
      });
      keys.appendChild(item);
    }
    const readable = data.readable_layer?.[state.kind];
    const star = readable === undefined ? "" : ` ★ layer ${readable + 1} is the most readable: ` +
      "its heads' weights tell the most about which piece each piece reads.";
    box.append(keys, node("p", { class: "note" }, NOTES[state.kind] + star));
  }

  function select(label, options, value, onChange) {
    const wrap = node("label", {}, `${label} `);
    const box = node("select", { name: label });
    for (const [key, text] of options) box.appendChild(new Option(text, key));
    box.value = value;
    box.addEventListener("change", () => onChange(box.value));
    wrap.appendChild(box);
    return [wrap, box];
  }

  function mount(root, data) {
    root.replaceChildren();
    const heads = data.encoder[0].length;
    const readable = (kind) => data.readable_layer?.[kind] ?? 0;
    const state = {
      kind: "cross", layer: readable("cross"), head: "all", focus: null, picked: null,
      width: Math.min(MAX_WIDTH, root.clientWidth || MAX_WIDTH),
    };
    const [kindBox, kindSelect] = select("kind", Object.entries(KINDS), state.kind, (v) => {
      Object.assign(state, { kind: v, layer: readable(v), focus: null, picked: null });
      state.redraw();
    });
    const layerOptions = data.encoder.map((_, i) => [String(i), `${i + 1}`]);
    const [layerBox, layerSelect] = select("layer", layerOptions, String(state.layer), (v) => {
      state.layer = Number(v);
      state.redraw();
    });
    const headOptions = [["all", "all"], ...[...Array(heads).keys()].map((h) => [String(h), `${h + 1}`])];
    const [headBox, headSelect] = select("head", headOptions, "all", (v) => {
      state.head = v;
      state.redraw();
    });
    const controls = node("div", { class: "controls" });
    controls.append(kindBox, layerBox, headBox);
    const legend = node("div", { class: "legend" });
    const svg = svgNode("svg", { class: "lines" });
    const table = node("div", { class: "table" });
    const grid = node("div", { class: "grid" });
    root.append(controls, legend, svg, table, grid);
    state.redraw = () => {
      kindSelect.value = state.kind;
      layerSelect.value = String(state.layer);
      headSelect.value = String(state.head);
      drawLegend(legend, data, state);
      drawLines(svg, data, state);
      drawTable(table, data, state);
      drawGrid(grid, data, state);
    };
    state.pick = (kind, layer, head) => {
      Object.assign(state, { kind, layer, head: String(head), focus: null, picked: null });
      state.redraw();
    };
    state.redraw();
    return state;
  }

  return { mount, tokens, labels, KINDS };
})();
