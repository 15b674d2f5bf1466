import type { Machine } from "../../api/generated";
import { statusTone } from "../../lib/node";
import { timeAgo } from "../../lib/status";
import { Card, CardContent, CardHeader, CardTitle } from "../../components/ui/card";
import { Badge } from "../../components/ui/badge";
import { Alert } from "../../components/ui/alert";

/** Conditions lists the machine's conditions, and what needs attention: drifted paths, paths waiting for a reboot, a removal in progress. */
export function Conditions({ m }: { m: Machine }) {
  return (
    <Card>
      <CardHeader>
        <CardTitle>Conditions</CardTitle>
      </CardHeader>
      <CardContent>
        <ul class="divide-y text-sm">
          {(m.conditions ?? []).map((c) => (
            <li key={c.type} class="flex flex-col gap-1 py-2">
              <div class="flex flex-wrap items-center gap-2">
                <span class="font-medium">{c.type}</span>
                <Badge tone={statusTone(c.status)}>{c.status}</Badge>
                <span class="text-muted-foreground">{c.reason}</span>
                <span class="ml-auto text-xs text-muted-foreground">{timeAgo(c.lastTransitionTime)}</span>
              </div>
              {c.message && <p class="break-words text-muted-foreground">{c.message}</p>}
            </li>
          ))}
        </ul>
        {m.driftPaths?.length ? <Alert tone="warn" title="Drift">{m.driftPaths.join(", ")}</Alert> : null}
        {m.rebootRequiredPaths?.length ? <Alert tone="warn" title="Waits for a reboot">{m.rebootRequiredPaths.join(", ")}</Alert> : null}
        {m.removal?.phase && <Alert tone="warn" title={`Removal: ${m.removal.phase}`}>{m.removal.message}</Alert>}
      </CardContent>
    </Card>
  );
}
