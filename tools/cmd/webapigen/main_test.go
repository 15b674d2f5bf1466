package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const swagger = "../../../contracts/proto/gen/openapi/ichor.swagger.json"

func TestGenerateIsDeterministicAndTyped(t *testing.T) {
	data, err := os.ReadFile(swagger)
	if err != nil {
		t.Fatal(err)
	}
	first, err := Generate(data)
	if err != nil {
		t.Fatal(err)
	}
	for range 5 {
		again, err := Generate(data)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(first, again) {
			t.Fatal("two runs over the same document differ")
		}
	}
	src := string(first)
	for _, want := range []string{
		"export interface Machine {",
		"  installDisk?: DiskSelector;",
		`export type WatchMachinesResponseEventType = "EVENT_TYPE_UNSPECIFIED" | "EVENT_TYPE_ADDED"`,
		"  approveMachine(args: { name: string; body: MachineServiceApproveMachineBody }, options?: CallOptions): Promise<ApproveMachineResponse>;",
		"  watchMachines(args: { resumeToken?: string }, onMessage: (message: WatchMachinesResponse) => void, options?: CallOptions): Promise<void>;",
		"return t.unary<ApproveMachineResponse>(\"POST\", `/api/v1/machines/${enc(args.name)}:approve`, undefined, args.body, options);",
		`  "@type"?: string;`,
	} {
		if !strings.Contains(src, want) {
			t.Errorf("the output lacks %q", want)
		}
	}
}

func TestGenerateRefusesBadInput(t *testing.T) {
	for name, tc := range map[string]struct{ doc, want string }{
		"not JSON":      {`swagger: "2.0"`, "not an OpenAPI JSON document"},
		"OpenAPI 3":     {`{"openapi": "3.0.0", "paths": {}}`, `want "2.0"`},
		"no paths":      {`{"swagger": "2.0"}`, "no paths"},
		"bad operation": {`{"swagger": "2.0", "paths": {"/x": {"get": {"operationId": "x", "responses": {"200": {"schema": {"type": "string"}}}}}}}`, "not Service_Method"},
		"remote ref":    {`{"swagger": "2.0", "paths": {"/x": {"get": {"operationId": "S_X", "responses": {"200": {"schema": {"$ref": "http://elsewhere#/x"}}}}}}}`, "unsupported $ref"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Generate([]byte(tc.doc))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error saying %q", err, tc.want)
			}
		})
	}
}

func TestRunLeavesTheOldFileOnError(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "generated.ts")
	if err := os.WriteFile(out, []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(bad, []byte(`{"swagger": "2.0"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := run(bad, out); err == nil {
		t.Fatal("a document without paths was accepted")
	}
	if b, _ := os.ReadFile(out); string(b) != "old" {
		t.Fatalf("the output was changed by a failed run: %q", b)
	}
}
