import type { ComponentChildren } from "preact";
import { cn } from "./cn";

const tones = {
  info: "border-border bg-muted/50",
  warn: "border-warn/60 bg-warn/10",
  error: "border-destructive/50 bg-destructive/10",
} as const;

export function Alert({ tone = "info", title, children, class: cls }: { tone?: keyof typeof tones; title?: string; children?: ComponentChildren; class?: string }) {
  return (
    <div role={tone === "error" ? "alert" : "status"} class={cn("rounded-md border p-3 text-sm", tones[tone], cls)}>
      {title && <p class="font-semibold">{title}</p>}
      {children && <div class={title ? "mt-1" : ""}>{children}</div>}
    </div>
  );
}
