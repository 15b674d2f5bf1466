/**
 * Sign-in to ichor-ui's OIDC issuer with the authorization code flow and PKCE
 * (S256), as a public client "ichor-ui". The refresh token lives in
 * sessionStorage (one tab's session, gone when the tab closes); the access
 * token only in memory. Refresh tokens rotate on every use, so the stored one
 * is replaced each time.
 */
import type { TokenSource } from "./transport";

export const clientID = "ichor-ui";
const refreshKey = "ichor.refresh";
const pendingKey = "ichor.signin";

interface Pending {
  verifier: string;
  state: string;
  nonce: string;
  returnTo: string;
}

interface TokenResponse {
  access_token: string;
  refresh_token?: string;
  expires_in?: number;
}

function redirectURI(): string {
  return `${location.origin}/auth/callback`;
}

function random(bytes = 32): string {
  const b = new Uint8Array(bytes);
  crypto.getRandomValues(b);
  return base64url(b);
}

function base64url(b: Uint8Array): string {
  let s = "";
  for (const x of b) s += String.fromCharCode(x);
  return btoa(s).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
}

/** challengeOf is the S256 PKCE challenge of a verifier (RFC 7636 §4.2). */
export async function challengeOf(verifier: string): Promise<string> {
  const digest = await crypto.subtle.digest("SHA-256", new TextEncoder().encode(verifier));
  return base64url(new Uint8Array(digest));
}

/** startSignIn sends the browser to the issuer's login form. */
export async function startSignIn(returnTo: string): Promise<void> {
  const p: Pending = { verifier: random(), state: random(16), nonce: random(16), returnTo };
  sessionStorage.setItem(pendingKey, JSON.stringify(p));
  const q = new URLSearchParams({
    response_type: "code",
    client_id: clientID,
    redirect_uri: redirectURI(),
    scope: "openid profile offline_access",
    state: p.state,
    nonce: p.nonce,
    code_challenge: await challengeOf(p.verifier),
    code_challenge_method: "S256",
  });
  location.assign(`/oidc/authorize?${q.toString()}`);
}

async function tokenCall(form: Record<string, string>): Promise<TokenResponse> {
  const resp = await fetch("/oidc/token", {
    method: "POST",
    headers: { "Content-Type": "application/x-www-form-urlencoded" },
    body: new URLSearchParams({ client_id: clientID, ...form }).toString(),
  });
  const body = (await resp.json().catch(() => ({}))) as TokenResponse & { error?: string; error_description?: string };
  if (!resp.ok) {
    throw new SignInError(body.error_description || body.error || `the token endpoint answered ${resp.status}`);
  }
  return body;
}

/** SignInError means the user has to sign in (again). */
export class SignInError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "SignInError";
  }
}

/** Session holds the tokens of one sign-in and renews the access token. */
export class Session implements TokenSource {
  private access = "";
  private expires = 0;
  private renewing: Promise<string> | null = null;
  onSignedOut: (reason: string) => void = () => {};

  /** hasRefresh reports whether the tab holds a sign-in to resume. */
  static hasRefresh(): boolean {
    return sessionStorage.getItem(refreshKey) !== null;
  }

  private take(t: TokenResponse) {
    this.access = t.access_token;
    this.expires = Date.now() + (t.expires_in ?? 300) * 1000;
    if (t.refresh_token) sessionStorage.setItem(refreshKey, t.refresh_token);
  }

  /** completeSignIn exchanges the code of the callback URL; it returns where to go. */
  async completeSignIn(params: URLSearchParams): Promise<string> {
    const raw = sessionStorage.getItem(pendingKey);
    sessionStorage.removeItem(pendingKey);
    if (params.get("error")) {
      throw new SignInError(params.get("error_description") || params.get("error") || "the sign-in failed");
    }
    if (!raw) throw new SignInError("this tab did not start a sign-in; start it again");
    const p = JSON.parse(raw) as Pending;
    if (params.get("state") !== p.state) throw new SignInError("the sign-in answer does not belong to this tab; start it again");
    const code = params.get("code");
    if (!code) throw new SignInError("the sign-in answer carries no code; start it again");
    this.take(await tokenCall({ grant_type: "authorization_code", code, redirect_uri: redirectURI(), code_verifier: p.verifier }));
    return p.returnTo || "/";
  }

  async accessToken(): Promise<string> {
    if (this.access && Date.now() < this.expires - 30_000) return this.access;
    return this.renew();
  }

  /** renew trades the refresh token for new tokens (one call at a time). */
  renew(): Promise<string> {
    if (!this.renewing) {
      this.renewing = (async () => {
        const rt = sessionStorage.getItem(refreshKey);
        if (!rt) {
          this.signedOut("sign in first");
          throw new SignInError("sign in first");
        }
        try {
          this.take(await tokenCall({ grant_type: "refresh_token", refresh_token: rt }));
          return this.access;
        } catch (e) {
          if (e instanceof SignInError) {
            sessionStorage.removeItem(refreshKey);
            this.signedOut(`sign in again: ${e.message}`);
          }
          throw e;
        }
      })().finally(() => {
        this.renewing = null;
      });
    }
    return this.renewing;
  }

  private signedOut(reason: string) {
    this.access = "";
    this.onSignedOut(reason);
  }

  /** signOut revokes the sign-in session at the issuer and forgets the tokens. */
  async signOut(): Promise<void> {
    const rt = sessionStorage.getItem(refreshKey);
    sessionStorage.removeItem(refreshKey);
    const token = rt ?? this.access;
    this.access = "";
    if (token) {
      await fetch("/oidc/revoke", {
        method: "POST",
        headers: { "Content-Type": "application/x-www-form-urlencoded" },
        body: new URLSearchParams({ client_id: clientID, token, token_type_hint: rt ? "refresh_token" : "access_token" }).toString(),
      }).catch(() => undefined);
    }
  }
}
