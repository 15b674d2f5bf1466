import { ApiError, describe } from "../api/errors";
import { Alert } from "./ui/alert";

/** ErrorAlert shows a failed call: a refusal with its checks, a 403, or the message. */
export function ErrorAlert({ error, what }: { error: unknown; what: string }) {
  if (!error) return null;
  if (error instanceof ApiError && error.refusals.length > 0) {
    return (
      <Alert tone="error" title={`${what} was refused; nothing was changed`}>
        <ul class="list-disc space-y-1 pl-5" data-testid="refusals">
          {error.refusals.map((r, i) => (
            <li key={i}>
              <span class="font-medium">{r.rule}</span>
              {r.field && <span class="text-muted-foreground"> ({r.field})</span>}
              {r.wayOut && <div>What to do: {r.wayOut}</div>}
              {r.overridable && <div class="text-xs text-muted-foreground">An admin with the override verb can let this through.</div>}
            </li>
          ))}
        </ul>
      </Alert>
    );
  }
  if (error instanceof ApiError && error.forbidden) {
    return (
      <Alert tone="error" title={`${what}: you are not allowed to do this (403)`}>
        <p data-testid="forbidden">{error.message}</p>
        <p class="mt-1 text-xs">Ask an Ichor admin for the operator or admin role.</p>
      </Alert>
    );
  }
  if (error instanceof ApiError && error.unimplemented) {
    return (
      <Alert tone="info" title={`${what}: not available on this server yet`}>
        {error.message}
      </Alert>
    );
  }
  return (
    <Alert tone="error" title={`${what} failed`}>
      {describe(error)}
    </Alert>
  );
}
