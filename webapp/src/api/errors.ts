import type { RpcStatus } from "./generated";

/**
 * A refusal of a dangerous-operation check (ichor.v1.Refusal in
 * contracts/proto/ichor/v1/errors.proto). RefusalDetails travels inside the
 * error's details as a google.protobuf.Any, which the OpenAPI document does not
 * describe; this is the one shape read from it.
 */
export interface Refusal {
  field?: string;
  rule?: string;
  wayOut?: string;
  overridable?: boolean;
}

const refusalType = "type.googleapis.com/ichor.v1.RefusalDetails";

/** gRPC status codes the console treats specially. */
export const Code = {
  Cancelled: 1,
  InvalidArgument: 3,
  NotFound: 5,
  PermissionDenied: 7,
  FailedPrecondition: 9,
  OutOfRange: 11,
  Unimplemented: 12,
  Unavailable: 14,
  Unauthenticated: 16,
} as const;

/** ApiError is a refused or failed call: the HTTP status and the gRPC status. */
export class ApiError extends Error {
  readonly httpStatus: number;
  readonly code: number;
  readonly refusals: Refusal[];

  constructor(httpStatus: number, status: RpcStatus | undefined, fallback: string) {
    super(status?.message || fallback);
    this.name = "ApiError";
    this.httpStatus = httpStatus;
    this.code = status?.code ?? 0;
    this.refusals = refusalsOf(status);
  }

  /** True when the API server or the backend forbade the call (HTTP 403). */
  get forbidden(): boolean {
    return this.httpStatus === 403 || this.code === Code.PermissionDenied;
  }

  /** True when the backend does not implement the call yet (HTTP 501). */
  get unimplemented(): boolean {
    return this.httpStatus === 501 || this.code === Code.Unimplemented;
  }
}

/** refusalsOf reads the RefusalDetails of a status, if any. */
export function refusalsOf(status: RpcStatus | undefined): Refusal[] {
  const out: Refusal[] = [];
  for (const d of status?.details ?? []) {
    if (d["@type"] === refusalType && Array.isArray(d.refusals)) {
      out.push(...(d.refusals as Refusal[]));
    }
  }
  return out;
}

/** describe is a one-line text for people. */
export function describe(e: unknown): string {
  if (e instanceof ApiError) {
    if (e.forbidden) return `Not allowed: ${e.message}`;
    if (e.unimplemented) return `Not available on this server yet: ${e.message}`;
    return e.message;
  }
  if (e instanceof Error) return e.message;
  return String(e);
}
