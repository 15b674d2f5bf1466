import type { Operation } from "../api/generated";
import { Badge } from "../components/ui/badge";
import { Card, CardContent, CardHeader, CardTitle } from "../components/ui/card";
import { fromTo, phaseText, phaseTone } from "../lib/operations";
import { timeAgo } from "../lib/status";

/** recent is the newest operations first (by creation), at most n. */
export function recent(ops: Operation[], n = 5): Operation[] {
  return [...ops].sort((a, b) => (b.createdAt ?? "").localeCompare(a.createdAt ?? "")).slice(0, n);
}

/** RecentOperations lists the cluster's latest operations on the Overview, each linked to its page. */
export function RecentOperations({ ops }: { ops: Operation[] | undefined }) {
  if (!ops) return null;
  const list = recent(ops);
  return (
    <Card>
      <CardHeader class="flex-row flex-wrap items-center justify-between">
        <CardTitle>Recent operations</CardTitle>
        <a href="/operations" class="text-sm text-muted-foreground hover:underline">
          All operations
        </a>
      </CardHeader>
      <CardContent>
        {list.length === 0 ? (
          <p class="text-sm text-muted-foreground">No operation has run on this cluster.</p>
        ) : (
          <ul class="divide-y text-sm" data-testid="recent-operations">
            {list.map((op) => (
              <li key={op.name} class="flex flex-wrap items-center gap-2 py-2">
                <a href={`/operations/${encodeURIComponent(op.name ?? "")}`} class="font-medium hover:underline">
                  {op.name}
                </a>
                <span class="text-muted-foreground">{op.type}</span>
                <Badge tone={phaseTone(op)}>{phaseText(op)}</Badge>
                <span class="text-muted-foreground">{fromTo(op)}</span>
                <span class="ml-auto text-xs text-muted-foreground">{timeAgo(op.completedAt || op.createdAt)}</span>
              </li>
            ))}
          </ul>
        )}
      </CardContent>
    </Card>
  );
}
