// @vitest-environment happy-dom
import { describe, expect, it } from "vitest";
import { act } from "preact/test-utils";
import type { Client, CreateUserRequest, User, UserServiceUpdateUserBody } from "../api/generated";
import { ApiError } from "../api/errors";
import { click as clickIn, consoleOf, show as showIn, type as typeIn, useRoot } from "../testing/dom";
import { navFor } from "./shell";
import { UsersPage, userNameProblem } from "./users";

/** A client over an in-memory list of users that records every write. */
function client(off = false) {
  const users: User[] = [{ name: "vera", username: "ichor:vera", displayName: "Vera", roles: ["viewer"], passwordSet: true, resourceVersion: "1" }];
  const created: CreateUserRequest[] = [];
  const updates: { name: string; body: UserServiceUpdateUserBody }[] = [];
  const resets: string[] = [];
  const c = {
    listUsers: () =>
      off ? Promise.reject(new ApiError(501, { code: 12, message: "unknown service ichor.v1.UserService" }, "501")) : Promise.resolve({ users: users.map((u) => ({ ...u })) }),
    createUser: ({ body }: { body: CreateUserRequest }) => {
      created.push(body);
      users.push({ name: body.name, username: `ichor:${body.name}`, displayName: body.displayName ?? body.name, roles: body.roles, resourceVersion: "1" });
      return Promise.resolve({ user: users[users.length - 1], password: "generated-password-123" });
    },
    updateUser: ({ name, body }: { name: string; body: UserServiceUpdateUserBody }) => {
      updates.push({ name, body });
      const u = users.find((x) => x.name === name)!;
      Object.assign(u, { roles: body.roles, disabled: body.disabled, resourceVersion: String(Number(u.resourceVersion) + 1) });
      return Promise.resolve({ user: u });
    },
    resetPassword: ({ name }: { name: string }) => {
      resets.push(name);
      return Promise.resolve({ password: "another-generated-456" });
    },
  };
  return { c: c as unknown as Client, created, updates, resets };
}

const root = useRoot();
const q = <T extends Element = HTMLElement>(sel: string) => root().querySelector<T>(sel);

describe("UsersPage", () => {
  it("lets an admin add a user, whose generated password is shown once", async () => {
    const { c, created } = client();
    await showIn(root(), consoleOf(c, ["ichor:admin"]), <UsersPage />);
    expect(q('[data-testid="user-vera"]')?.textContent).toContain("ichor:vera");
    await typeIn(root(), '[data-testid="user-name"]', "Bad_Name");
    expect(root().textContent).toContain('"Bad_Name" is not a user name');
    expect(q<HTMLButtonElement>('[data-testid="user-create"]')!.disabled).toBe(true);
    await typeIn(root(), '[data-testid="user-name"]', "uma");
    await act(() => {
      const op = q<HTMLInputElement>("#new-user-role-operator")!;
      op.checked = true;
      op.dispatchEvent(new Event("change"));
    });
    await clickIn(root(), '[data-testid="user-create"]');
    expect(created).toEqual([{ name: "uma", displayName: undefined, roles: ["viewer", "operator"] }]);
    expect(q('[data-testid="one-time-password"]')?.textContent).toBe("generated-password-123");
    expect(q('[data-testid="user-uma"]')).not.toBeNull();
    await clickIn(root(), '[data-testid="one-time-password-done"]');
    expect(q('[data-testid="one-time-password"]')).toBeNull();
  });

  it("lets an admin change roles, disable a user and reset a password", async () => {
    const { c, updates, resets } = client();
    await showIn(root(), consoleOf(c, ["ichor:admin"]), <UsersPage />);
    expect(q('[data-testid="user-vera-save"]')).toBeNull();
    await act(() => {
      const op = q<HTMLInputElement>("#user-vera-role-operator")!;
      op.checked = true;
      op.dispatchEvent(new Event("change"));
    });
    await clickIn(root(), '[data-testid="user-vera-save"]');
    expect(updates[0]).toEqual({ name: "vera", body: { displayName: "Vera", email: undefined, roles: ["viewer", "operator"], disabled: false, resourceVersion: "1" } });
    await clickIn(root(), '[data-testid="user-vera-toggle"]');
    expect(updates[1].body.disabled).toBe(true);
    expect(q('[data-testid="user-vera-state"]')?.textContent).toBe("Disabled");
    await clickIn(root(), '[data-testid="user-vera-reset"]');
    expect(resets).toEqual(["vera"]);
    expect(q('[data-testid="one-time-password"]')?.textContent).toBe("another-generated-456");
  });

  it("shows a viewer the list without the controls", async () => {
    const { c } = client();
    await showIn(root(), consoleOf(c, ["ichor:viewer"]), <UsersPage />);
    expect(q('[data-testid="user-vera"]')).not.toBeNull();
    expect(q('[data-testid="user-create"]')).toBeNull();
    expect(q('[data-testid="user-vera-reset"]')).toBeNull();
    expect(root().textContent).toContain("Only an Ichor admin adds and changes users.");
  });

  it("says when Ichor's own users are off", async () => {
    const { c } = client(true);
    await showIn(root(), consoleOf(c, ["ichor:admin"]), <UsersPage />);
    expect(q('[data-testid="users-off"]')).not.toBeNull();
    expect(q('[data-testid="user-create"]')).toBeNull();
  });
});

describe("navFor and userNameProblem", () => {
  it("offers Users to Ichor's own users only", () => {
    expect(navFor("ichor:ada").some((n) => n.href === "/users")).toBe(true);
    expect(navFor("oidc:ada").some((n) => n.href === "/users")).toBe(false);
  });
  it("checks a user name as the API does", () => {
    expect(userNameProblem("uma")).toBe("");
    expect(userNameProblem("uma.b-2")).toBe("");
    expect(userNameProblem("-uma")).toContain("is not a user name");
    expect(userNameProblem("")).toContain("Name the user");
  });
});
