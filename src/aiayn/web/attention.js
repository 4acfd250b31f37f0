// The attention view of aiayn's pages, plain JS and SVG, nothing loaded from elsewhere.
// In the style of the paper's Figures 3-5: the query pieces on the left, the key pieces on
// the right, one line per (head, query, key) weighted by attention, one colour per head.
// Below, a grid of small heat maps, layers x heads; a click on one picks that layer and head.
//
// data: {source: [piece], target: [piece], encoder|decoder|cross: [layer][head][query][key]}
// AttentionView.mount(element, data) draws it; a click on a piece shows only its lines.
"use strict";

const AttentionView = (() => {
  const SVG = "http://www.w3.org/2000/svg";
  const KINDS = {
    encoder: "encoder self-attention",
    decoder: "decoder self-attention",
    cross: "encoder-decoder attention",
  };
  const ROW = 22; // pixels per piece
  const WIDTH = 520;
  const LEFT_X = 150; // right edge of the query pieces
  const RIGHT_X = 370; // left edge of the key pieces

  function headColour(head, heads) {
    return `hsl(${Math.round((360 * head) / heads)}, 70%, 42%)`;
  }

  function svgNode(name, attrs) {
    const node = document.createElementNS(SVG, name);
    for (const [key, value] of Object.entries(attrs)) node.setAttribute(key, value);
    return node;
  }

  // (query pieces, key pieces) of a kind: queries attend to keys.
  function tokens(data, kind) {
    const queries = kind === "encoder" ? data.source : data.target;
    return [queries, kind === "decoder" ? data.target : data.source];
  }

  // The lines of one layer: every head, or one; only those touching `focus` when given.
  // A weight of exactly 0 (a masked position) draws nothing.
  function drawLines(svg, data, state) {
    svg.replaceChildren();
    const [left, right] = tokens(data, state.kind);
    const weights = data[state.kind][state.layer]; // [head][query][key]
    const heads = weights.length;
    svg.setAttribute("height", ROW * (Math.max(left.length, right.length) + 1));
    svg.setAttribute("width", WIDTH);
    const chosen = state.head === "all" ? [...Array(heads).keys()] : [Number(state.head)];
    for (const h of chosen) {
      weights[h].forEach((row, i) => {
        row.forEach((w, j) => {
          if (w <= 0) return;
          if (state.focus && state.focus.side === "left" && state.focus.index !== i) return;
          if (state.focus && state.focus.side === "right" && state.focus.index !== j) return;
          svg.appendChild(svgNode("line", {
            class: "attn-line", x1: LEFT_X + 6, y1: ROW * (i + 1) - 5, x2: RIGHT_X - 6,
            y2: ROW * (j + 1) - 5, stroke: headColour(h, heads), "stroke-width": 2,
            "stroke-opacity": Math.min(1, w * (state.focus ? 1.5 : 1)),
            "data-head": h, "data-weight": w,
          }));
        });
      });
    }
    const columns = [[left, "left", LEFT_X, "end"], [right, "right", RIGHT_X, "start"]];
    for (const [pieces, side, x, anchor] of columns) {
      pieces.forEach((piece, index) => {
        const text = svgNode("text", {
          class: "tok", x, y: ROW * (index + 1), "text-anchor": anchor,
          "data-side": side, "data-index": index,
        });
        const focused = state.focus && state.focus.side === side && state.focus.index === index;
        if (focused) text.classList.add("focused");
        text.textContent = piece;
        text.addEventListener("click", () => {
          state.focus = focused ? null : { side, index };
          state.redraw();
        });
        svg.appendChild(text);
      });
    }
  }

  // One small heat map per (layer, head) of the chosen kind.
  function drawGrid(grid, data, state) {
    grid.replaceChildren();
    const layers = data[state.kind];
    const cell = Math.max(2, Math.floor(90 / Math.max(...tokens(data, state.kind).map((t) => t.length))));
    layers.forEach((heads, layer) => {
      const row = document.createElement("div");
      row.className = "grid-row";
      const label = document.createElement("span");
      label.className = "grid-label";
      label.textContent = `layer ${layer + 1}`;
      row.appendChild(label);
      heads.forEach((matrix, head) => {
        const svg = svgNode("svg", {
          class: "heat", width: cell * matrix[0].length, height: cell * matrix.length,
          "data-layer": layer, "data-head": head,
        });
        const title = svgNode("title", {});
        title.textContent = `layer ${layer + 1}, head ${head + 1}`;
        svg.appendChild(title);
        matrix.forEach((weights, i) => weights.forEach((w, j) => {
          svg.appendChild(svgNode("rect", {
            x: j * cell, y: i * cell, width: cell, height: cell,
            fill: headColour(head, heads.length), "fill-opacity": w,
          }));
        }));
        const picked = layer === state.layer && String(head) === String(state.head);
        if (picked) svg.classList.add("picked");
        svg.addEventListener("click", () => {
          state.layer = layer;
          state.head = String(head);
          state.redraw();
        });
        row.appendChild(svg);
      });
      grid.appendChild(row);
    });
  }

  function select(label, options, value, onChange) {
    const wrap = document.createElement("label");
    wrap.textContent = `${label} `;
    const box = document.createElement("select");
    box.name = label;
    for (const [key, text] of options) box.appendChild(new Option(text, key));
    box.value = value;
    box.addEventListener("change", () => onChange(box.value));
    wrap.appendChild(box);
    return [wrap, box];
  }

  function mount(root, data) {
    root.replaceChildren();
    const heads = data.encoder[0].length;
    const state = { kind: "cross", layer: 0, head: "all", focus: null };
    const controls = document.createElement("div");
    controls.className = "controls";
    const [kindBox] = select("kind", Object.entries(KINDS), state.kind, (v) => {
      state.kind = v;
      state.focus = null;
      state.redraw();
    });
    const layerOptions = data.encoder.map((_, i) => [String(i), `${i + 1}`]);
    const [layerBox, layerSelect] = select("layer", layerOptions, "0", (v) => {
      state.layer = Number(v);
      state.redraw();
    });
    const headOptions = [["all", "all"], ...[...Array(heads).keys()].map((h) => [String(h), `${h + 1}`])];
    const [headBox, headSelect] = select("head", headOptions, "all", (v) => {
      state.head = v;
      state.redraw();
    });
    controls.append(kindBox, layerBox, headBox);
    const svg = svgNode("svg", { class: "lines" });
    const grid = document.createElement("div");
    grid.className = "grid";
    root.append(controls, svg, grid);
    state.redraw = () => {
      layerSelect.value = String(state.layer);
      headSelect.value = String(state.head);
      drawLines(svg, data, state);
      drawGrid(grid, data, state);
    };
    state.redraw();
    return state;
  }

  return { mount, tokens, KINDS };
})();
