import type { ComponentChildren } from "preact";
import { cn } from "./cn";

const tones = {
  neutral: "bg-muted text-foreground",
  ok: "bg-ok/15 text-ok border-ok/30",
  warn: "bg-warn/15 text-warn border-warn/40",
  bad: "bg-destructive/15 text-destructive border-destructive/30",
} as const;

export type Tone = keyof typeof tones;

export function Badge({ tone = "neutral", class: cls, children, title }: { tone?: Tone; class?: string; children?: ComponentChildren; title?: string }) {
  return (
    <span title={title} class={cn("inline-flex items-center rounded-full border px-2 py-0.5 text-xs font-medium whitespace-nowrap", tones[tone], cls)}>
      {children}
    </span>
  );
}
