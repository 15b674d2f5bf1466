/**
 * Colour contrast as WCAG 2.x computes it, for the colours of index.css
 * (oklch) and Tailwind's "bg-x/NN" alpha over the card.
 */

export type RGB = [number, number, number]; // sRGB, gamma-encoded, 0..1

/** oklchToRGB converts an oklch colour to gamma-encoded sRGB, clipped to the gamut. */
export function oklchToRGB(L: number, C: number, hDeg: number): RGB {
  const h = (hDeg * Math.PI) / 180;
  const a = C * Math.cos(h);
  const b = C * Math.sin(h);
  const l = (L + 0.3963377774 * a + 0.2158037573 * b) ** 3;
  const m = (L - 0.1055613458 * a - 0.0638541728 * b) ** 3;
  const s = (L - 0.0894841775 * a - 1.291485548 * b) ** 3;
  const lin: RGB = [
    4.0767416621 * l - 3.3077115913 * m + 0.2309699292 * s,
    -1.2684380046 * l + 2.6097574011 * m - 0.3413193965 * s,
    -0.0041960863 * l - 0.7034186147 * m + 1.707637201 * s,
  ];
  return lin.map((v) => {
    const c = Math.min(1, Math.max(0, v));
    return c <= 0.0031308 ? 12.92 * c : 1.055 * c ** (1 / 2.4) - 0.055;
  }) as RGB;
}

/** parseOklch reads "oklch(L C H)" (L as a number or a percentage). */
export function parseOklch(s: string): RGB {
  const m = /oklch\(\s*([\d.]+)(%?)\s+([\d.]+)\s+([\d.]+)\s*\)/.exec(s);
  if (!m) throw new Error(`not an oklch() colour: ${s}`);
  const L = Number(m[1]) / (m[2] ? 100 : 1);
  return oklchToRGB(L, Number(m[3]), Number(m[4]));
}

/** over composites a colour with alpha over an opaque background (in sRGB, as browsers paint). */
export function over(fg: RGB, alpha: number, bg: RGB): RGB {
  return fg.map((c, i) => alpha * c + (1 - alpha) * bg[i]) as RGB;
}

function luminance(c: RGB): number {
  const [r, g, b] = c.map((v) => (v <= 0.04045 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4));
  return 0.2126 * r + 0.7152 * g + 0.0722 * b;
}

/** contrast is the WCAG contrast ratio of two opaque colours (1 to 21). */
export function contrast(a: RGB, b: RGB): number {
  const [x, y] = [luminance(a), luminance(b)].sort((p, q) => q - p);
  return (x + 0.05) / (y + 0.05);
}

/** themeColours reads the custom properties of :root and of .dark (over :root) from a stylesheet. */
export function themeColours(css: string): { light: Record<string, string>; dark: Record<string, string> } {
  const block = (sel: string) => {
    const m = new RegExp(`(^|\\n)${sel.replace(".", "\\.")}\\s*\\{([^}]*)\\}`).exec(css);
    if (!m) throw new Error(`no ${sel} block in the stylesheet`);
    const out: Record<string, string> = {};
    for (const d of m[2].matchAll(/--([\w-]+):\s*([^;]+);/g)) out[d[1]] = d[2].trim();
    return out;
  };
  const light = block(":root");
  return { light, dark: { ...light, ...block(".dark") } };
}
