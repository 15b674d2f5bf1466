import type { Machine } from "../../api/generated";
import { Badge } from "../../components/ui/badge";
import { Button } from "../../components/ui/button";
import { StateBadge, StateDetail } from "../../components/state";
import { NodeActionButtons } from "./actions";

/** NodeHeader is the node's name, state and role, the node actions when onAction is given, and the remove button when onRemove is given. */
export function NodeHeader({ m, onRemove, onAction }: { m: Machine; onRemove?: () => void; onAction?: (action: string) => void }) {
  return (
    <div class="flex flex-col gap-1">
    <div class="flex flex-wrap items-center gap-3">
      <h1 class="text-xl font-semibold break-all">{m.name}</h1>
      <StateBadge m={m} />
      {m.role && <Badge>{m.role}</Badge>}
      {(onAction || onRemove) && (
        <div class="ml-auto flex flex-wrap gap-2">
          {onAction && <NodeActionButtons onAction={onAction} />}
          {onRemove && (
            <Button variant="destructive" onClick={onRemove} data-testid="remove-node">
              Remove node…
            </Button>
          )}
        </div>
      )}
    </div>
      <StateDetail m={m} class="text-sm text-muted-foreground break-words" />
    </div>
  );
}
