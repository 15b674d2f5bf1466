import type { AttentionItem } from "../api/generated";
import { Badge } from "../components/ui/badge";
import { Button, LinkButton } from "../components/ui/button";
import { actionOf, forHow, hrefOf, severityTone } from "../lib/attention";

/** What the Overview does for an item's button that is not a link. */
export interface AttentionHandlers {
  apply: () => void;
  resumeOperation: (name: string) => void;
  resumeCluster: () => void;
}

/**
 * AttentionList renders the backend's needs-attention items as they come
 * (contracts/pkg/attention writes the words): severity, the summary linked
 * to its subject, how long it has lasted, the action, and the raw text
 * behind "Details".
 */
export function AttentionList({ items, canWrite, now, on }: { items: AttentionItem[]; canWrite: boolean; now: number; on: AttentionHandlers }) {
  return (
    <ul class="divide-y" data-testid="attention">
      {items.map((it) => {
        const href = hrefOf(it);
        const act = actionOf(it, canWrite);
        const how = forHow(it.since, now);
        return (
          <li key={it.key} class="flex flex-wrap items-start gap-2 py-2 text-sm" data-key={it.key} data-severity={it.severity}>
            <Badge tone={severityTone(it.severity)}>{it.severity ?? "Info"}</Badge>
            <div class="min-w-0 flex-1">
              {href ? (
                <a href={href} class="break-words font-medium hover:underline" data-testid="attention-summary">
                  {it.summary}
                </a>
              ) : (
                <span class="break-words font-medium" data-testid="attention-summary">
                  {it.summary}
                </span>
              )}
              {how && (
                <span class="ml-2 text-xs text-muted-foreground" data-testid="attention-since" title={it.since}>
                  {how}
                </span>
              )}
              {(it.detail || it.command) && (
                <details class="mt-1">
                  <summary class="cursor-pointer text-xs text-muted-foreground">Details</summary>
                  {it.detail && <pre class="mt-1 whitespace-pre-wrap break-all rounded bg-muted p-2 font-mono text-xs" data-testid="attention-detail">{it.detail}</pre>}
                  {it.command && (
                    <p class="mt-1 text-xs text-muted-foreground">
                      With the CLI: <code class="font-mono">{it.command}</code>
                    </p>
                  )}
                </details>
              )}
            </div>
            {act && "href" in act && (
              <LinkButton size="sm" href={act.href}>
                {act.label}
              </LinkButton>
            )}
            {act && "run" in act && (
              <Button
                size="sm"
                variant="outline"
                data-testid={`attention-${act.run}`}
                onClick={() => (act.run === "apply" ? on.apply() : act.run === "resumeCluster" ? on.resumeCluster() : on.resumeOperation(it.subject ?? ""))}
              >
                {act.label}
              </Button>
            )}
          </li>
        );
      })}
    </ul>
  );
}
