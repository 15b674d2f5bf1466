import * as api from "../api/v1alpha1";
import type { Tone } from "../components/ui/badge";

/**
 * discoveryTone is the badge tone of a discovery result: a machine found
 * (pending approval, or already known) is ok, an address that does not answer
 * is neutral, and the rest (configured by another cluster, an identity
 * conflict, an unknown result) need a look.
 */
export function discoveryTone(result: string | undefined): Tone {
  switch (result) {
    case api.DiscoveryResultPending:
    case api.DiscoveryResultKnown:
      return "ok";
    case api.DiscoveryResultUnreachable:
      return "neutral";
    default:
      return "warn";
  }
}
