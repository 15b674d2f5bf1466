import type { Machine } from "../api/generated";
import { stateOf } from "../lib/status";
import { Badge } from "./ui/badge";

/** StateBadge is the machine's state in one word; its detail is in the page (StateDetail), not only in a tooltip. */
export function StateBadge({ m }: { m: Machine }) {
  const s = stateOf(m);
  return (
    <Badge tone={s.tone}>{s.text}</Badge>
  );
}

/** StateDetail is the reason behind a state that is not fine (the Ready condition's message, the removal's step), as text. */
export function StateDetail({ m, class: cls }: { m: Machine; class?: string }) {
  const s = stateOf(m);
  if (!s.detail || s.tone === "ok") return null;
  return <p class={cls ?? "text-xs text-muted-foreground break-words"}>{s.detail}</p>;
}
