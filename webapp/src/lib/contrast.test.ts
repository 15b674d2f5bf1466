/// <reference types="node" />
import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { badgeTones } from "../components/ui/badge";
import { buttonVariants } from "../components/ui/button";
import { contrast, over, parseOklch, themeColours, type RGB } from "./contrast";

// The stylesheet as written (vitest does not load CSS, not even with ?raw).
const themes = themeColours(readFileSync(new URL("../index.css", import.meta.url), "utf8"));

/** colourOf resolves a Tailwind colour class part ("ok/12", "muted-foreground") to an opaque colour over the card. */
function paint(vars: Record<string, string>, cls: string, prefix: "bg" | "text", base: RGB): RGB {
  const m = new RegExp(`(?:^|\\s)${prefix}-([a-z-]+)(?:/(\\d+))?(?:\\s|$)`).exec(cls);
  if (!m) throw new Error(`no ${prefix}- colour in "${cls}"`);
  const v = vars[m[1]];
  if (!v) throw new Error(`--${m[1]} is not a colour of index.css (from "${cls}")`);
  return over(parseOklch(v), m[2] ? Number(m[2]) / 100 : 1, base);
}

describe("contrast", () => {
  it("computes WCAG ratios: black on white is 21, white on white 1", () => {
    expect(contrast([0, 0, 0], [1, 1, 1])).toBeCloseTo(21, 1);
    expect(contrast([1, 1, 1], [1, 1, 1])).toBeCloseTo(1, 5);
    // #767676 on white is the classic 4.54:1.
    const g = 0x76 / 255;
    expect(contrast([g, g, g], [1, 1, 1])).toBeCloseTo(4.54, 1);
    expect(parseOklch("oklch(1 0 0)").map((c) => Math.round(c * 255))).toEqual([255, 255, 255]);
  });

  for (const [theme, vars] of Object.entries(themes)) {
    const card = parseOklch(vars.card);
    for (const [tone, cls] of Object.entries(badgeTones)) {
      it(`badge ${tone} text is 4.5:1 or more on its background (${theme})`, () => {
        const bg = paint(vars, cls, "bg", card);
        const fg = paint(vars, cls, "text", bg);
        expect(contrast(fg, bg), `${tone} badge in the ${theme} theme`).toBeGreaterThanOrEqual(4.5);
      });
    }
    for (const [variant, cls] of Object.entries(buttonVariants)) {
      it(`button ${variant} text is 4.5:1 or more (${theme})`, () => {
        const bg = /(?:^|\s)bg-/.test(cls) ? paint(vars, cls, "bg", card) : card;
        const fg = paint(vars, cls, "text", bg);
        expect(contrast(fg, bg), `${variant} button in the ${theme} theme`).toBeGreaterThanOrEqual(4.5);
      });
    }
    it(`muted text is 4.5:1 or more on the page, the card and muted (${theme})`, () => {
      const mf = parseOklch(vars["muted-foreground"]);
      for (const bg of ["background", "card", "muted"]) {
        expect(contrast(mf, parseOklch(vars[bg])), `muted-foreground on ${bg}`).toBeGreaterThanOrEqual(4.5);
      }
    });
  }
});
