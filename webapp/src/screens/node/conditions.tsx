import type { Condition, Machine } from "../../api/generated";
import { conditionTone } from "../../lib/node";
import { abnormal, timeAgo } from "../../lib/status";
import { Card, CardContent, CardHeader, CardTitle } from "../../components/ui/card";
import { Badge } from "../../components/ui/badge";
import { Alert } from "../../components/ui/alert";

/** Conditions lists the machine's conditions, and what needs attention: drifted paths, paths waiting for a reboot, a removal in progress. */
export function Conditions({ m }: { m: Machine }) {
  const conds = m.conditions ?? [];
  // Abnormal first, Ready leading; the informational ones after; the
  // healthy ones folded.
  const bad = conds.filter(abnormal).sort((a, b) => Number(b.type === "Ready") - Number(a.type === "Ready"));
  const info = conds.filter((c) => !abnormal(c) && conditionTone(c) === "neutral");
  const problemsFirst = [...bad, ...info];
  const healthy = conds.filter((c) => !abnormal(c) && conditionTone(c) === "ok");
  return (
    <Card>
      <CardHeader>
        <CardTitle>Conditions</CardTitle>
      </CardHeader>
      <CardContent>
        <ConditionList conds={problemsFirst} />
        {healthy.length > 0 && (
          <details class="mt-2 text-sm">
            <summary class="cursor-pointer text-muted-foreground">
              {healthy.length} condition{healthy.length === 1 ? "" : "s"} OK
            </summary>
            <ConditionList conds={healthy} />
          </details>
        )}
        {m.driftPaths?.length ? <Alert tone="warn" title="Drift">{m.driftPaths.join(", ")}</Alert> : null}
        {m.rebootRequiredPaths?.length ? <Alert tone="warn" title="Waits for a reboot">{m.rebootRequiredPaths.join(", ")}</Alert> : null}
        {m.removal?.phase && <Alert tone="warn" title={`Removal: ${m.removal.phase}`}>{m.removal.message}</Alert>}
      </CardContent>
    </Card>
  );
}

function ConditionList({ conds }: { conds: Condition[] }) {
  return (
    <ul class="divide-y text-sm">
      {conds.map((c) => (
        <li key={c.type} class="flex flex-col gap-1 py-2">
          <div class="flex flex-wrap items-center gap-2">
            <span class="font-medium">{c.type}</span>
            <Badge tone={conditionTone(c)}>{c.status}</Badge>
            <span class="text-muted-foreground">{c.reason}</span>
            <span class="ml-auto text-xs text-muted-foreground">{timeAgo(c.lastTransitionTime)}</span>
          </div>
          {c.message && <p class="break-words text-muted-foreground">{c.message}</p>}
        </li>
      ))}
    </ul>
  );
}
