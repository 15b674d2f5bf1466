import type { Refusal } from "../api/generated";
import { Alert } from "./ui/alert";

/** RefusalList shows what the backend's shared checks refuse, each with its field and way out. */
export function RefusalList({ refusals, title, testid }: { refusals: Refusal[]; title: string; testid: string }) {
  if (!refusals.length) return null;
  return (
    <Alert tone="error" title={title}>
      <ul class="list-disc space-y-1 pl-5" data-testid={testid}>
        {refusals.map((r, i) => (
          <li key={i}>
            <span class="font-medium">{r.rule}</span>
            {r.field && <span class="text-muted-foreground"> ({r.field})</span>}
            {r.wayOut && <div>What to do: {r.wayOut}</div>}
            {r.overridable && <div class="text-xs text-muted-foreground">An admin with the override verb on the cluster can let this through.</div>}
          </li>
        ))}
      </ul>
    </Alert>
  );
}
