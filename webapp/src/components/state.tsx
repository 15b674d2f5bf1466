import type { Machine } from "../api/generated";
import { stateOf } from "../lib/status";
import { Badge } from "./ui/badge";

export function StateBadge({ m }: { m: Machine }) {
  const s = stateOf(m);
  return (
    <Badge tone={s.tone} title={s.detail}>
      {s.text}
    </Badge>
  );
}
