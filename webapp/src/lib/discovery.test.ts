import { describe, expect, it } from "vitest";
import { discoveryTone } from "./discovery";

describe("discoveryTone", () => {
  it("is ok for a machine found, neutral for no answer, warn for the rest", () => {
    expect(discoveryTone("Pending")).toBe("ok");
    expect(discoveryTone("Known")).toBe("ok");
    expect(discoveryTone("Unreachable")).toBe("neutral");
    expect(discoveryTone("AlreadyConfigured")).toBe("warn");
    expect(discoveryTone("Conflict")).toBe("warn");
    expect(discoveryTone(undefined)).toBe("warn");
  });
});
