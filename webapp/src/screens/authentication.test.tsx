// @vitest-environment happy-dom
import { describe, expect, it } from "vitest";
import { act } from "preact/test-utils";
import type { Authentication, Client, GetAuthenticationResponse, UpdateAuthenticationRequest } from "../api/generated";
import { ApiError } from "../api/errors";
import type { Console } from "../context";
import { consoleOf, settle, show, type, useRoot } from "../testing/dom";
import { AuthenticationCard, authenticationOf, authFormOf } from "./authentication";

/** A client over one stored spec.authentication that records every write. */
function client(canWrite: boolean, refuse?: ApiError) {
  let stored: Authentication = { ichorUsers: false };
  const updates: UpdateAuthenticationRequest[] = [];
  const view = (): GetAuthenticationResponse => ({ authentication: stored, canWrite, issuerPublished: true, restartPending: updates.length ? ["cp-1", "cp-2"] : [] });
  const c = {
    getAuthentication: () => Promise.resolve(view()),
    updateAuthentication: ({ body }: { body: UpdateAuthenticationRequest }) => {
      if (refuse) return Promise.reject(refuse);
      updates.push(body);
      stored = body.authentication ?? {};
      return Promise.resolve({ changed: true, current: view() });
    },
  };
  return { c: c as unknown as Client, updates };
}

const root = useRoot();
const q = <T extends Element = HTMLElement>(sel: string) => root().querySelector<T>(sel);
const admin = (c: Client) => consoleOf(c, ["ichor:admin"], { cluster: { name: "prod" } as Console["cluster"] });

async function submit() {
  await act(() => q<HTMLFormElement>('form[aria-label="Cluster authentication"]')!.requestSubmit());
  await settle();
}

describe("AuthenticationCard", () => {
  it("shows a viewer the configuration without a way to change it", async () => {
    const { c } = client(false);
    await show(root(), consoleOf(c, ["ichor:viewer"], { canWrite: false }), <AuthenticationCard />);
    expect(q('[data-testid="auth-viewer"]')).not.toBeNull();
    expect(q('[data-testid="auth-save"]')).toBeNull();
    expect(q<HTMLInputElement>("#auth-issuer")!.disabled).toBe(true);
  });

  it("lets an admin trust an external provider, refusing one without an audience first", async () => {
    const { c, updates } = client(true);
    await show(root(), admin(c), <AuthenticationCard />);
    await type(root(), "#auth-issuer", "https://login.example.com/realms/main");
    await submit();
    expect(q('[data-testid="auth-form-error"]')?.textContent).toContain("audience");
    expect(updates).toEqual([]);
    await type(root(), "#auth-audiences", "kubernetes, kubectl ");
    await type(root(), "#auth-username-claim", "email");
    await submit();
    expect(updates).toEqual([
      { authentication: { ichorUsers: false, external: { issuerUrl: "https://login.example.com/realms/main", audiences: ["kubernetes", "kubectl"], usernameClaim: "email", groupsClaim: undefined, certificateAuthority: undefined } } },
    ]);
    expect(root().textContent).toContain("Saved. The control planes now wait for a kube-apiserver restart.");
    expect(q('[data-testid="auth-pending"]')?.textContent).toContain("cp-1, cp-2");
    expect(root().textContent).toContain("Roll it out");
  });

  it("shows the API's refusal and keeps the form", async () => {
    const refusal = new ApiError(400, { code: 3, message: "changing the authentication of TalosCluster prod is refused; nothing was changed: spec.authentication.external: issuer.url must be https" }, "400");
    const { c } = client(true, refusal);
    await show(root(), admin(c), <AuthenticationCard />);
    await type(root(), "#auth-issuer", "https://idp.example.com");
    await type(root(), "#auth-audiences", "k");
    await submit();
    expect(root().textContent).toContain("nothing was changed");
    expect(q<HTMLInputElement>("#auth-issuer")!.value).toBe("https://idp.example.com");
  });
});

describe("authenticationOf", () => {
  it("is no external provider for an empty issuer URL, and round-trips a form", () => {
    expect(authenticationOf({ ...authFormOf(undefined), ichorUsers: true })).toEqual({ ichorUsers: true });
    const a: Authentication = { ichorUsers: true, external: { issuerUrl: "https://x.example.com", audiences: ["a", "b"], groupsClaim: "groups" } };
    expect(authenticationOf(authFormOf(a))).toEqual({ ...a, external: { ...a.external, usernameClaim: undefined, certificateAuthority: undefined } });
  });
});
