import type { ComponentChildren } from "preact";
import { cn } from "./cn";

/**
 * The badge tones: the tone's colour at 12 % over the card, and the tone's
 * own text colour. src/lib/contrast.test.ts reads these classes and the
 * colours of index.css and holds every pair at 4.5:1 or more in both themes.
 */
export const badgeTones = {
  neutral: "bg-muted text-foreground border-border",
  ok: "bg-ok/12 text-ok-foreground border-ok/40",
  warn: "bg-warn/12 text-warn-foreground border-warn/50",
  bad: "bg-destructive/12 text-destructive-foreground border-destructive/40",
} as const;

export type Tone = keyof typeof badgeTones;

export function Badge({ tone = "neutral", class: cls, children, title }: { tone?: Tone; class?: string; children?: ComponentChildren; title?: string }) {
  return (
    <span title={title} class={cn("inline-flex items-center rounded-full border px-2 py-0.5 text-xs font-medium whitespace-nowrap", badgeTones[tone], cls)}>
      {children}
    </span>
  );
}
