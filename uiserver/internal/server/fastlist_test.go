package server_test

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	ichorv1 "github.com/maeshinshin/ichor/contracts/proto/gen/ichor/v1"
)

// TestListMachinesSharedEncodings: the list served from the encodings made
// once per change is the list the service returns, over gRPC and REST, with
// the filter, the errors and the other routes under /api/v1/machines intact,
// and it follows a change of the machines.
func TestListMachinesSharedEncodings(t *testing.T) {
	createMachine(t, "enc-m1", ichorv1alpha1.ApprovalPending, "")
	ctx := context.Background()
	c := httpClient()
	grpcList := func() *ichorv1.ListMachinesResponse {
		t.Helper()
		resp, err := machines(t, viewer(t)).ListMachines(ctx, &ichorv1.ListMachinesRequest{})
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	restList := func(query string) *ichorv1.ListMachinesResponse {
		t.Helper()
		code, body := rest(t, c, http.MethodGet, "/api/v1/machines"+query, viewer(t), "")
		if code != http.StatusOK {
			t.Fatalf("REST list%s: %d %v", query, code, body)
		}
		out := &ichorv1.ListMachinesResponse{}
		if err := protojson.Unmarshal([]byte(toJSON(body)), out); err != nil {
			t.Fatal(err)
		}
		return out
	}
	// Twice each: the second answer comes from the cached encoding.
	for range 2 {
		g, r := grpcList(), restList("")
		if !proto.Equal(g, r) {
			t.Fatalf("gRPC and REST lists differ:\n%v\n%v", g, r)
		}
		found := false
		for _, m := range g.GetMachines() {
			found = found || m.GetName() == "enc-m1"
		}
		if !found {
			t.Fatal("the list lacks enc-m1")
		}
	}
	// The filter is read from the query as the gateway reads it.
	for _, q := range []string{"?approvalState=approved", "?approval_state=approved"} {
		for _, m := range restList(q).GetMachines() {
			if m.GetApproval().GetState() != ichorv1alpha1.ApprovalApproved {
				t.Fatalf("%s listed %s (%s)", q, m.GetName(), m.GetApproval().GetState())
			}
		}
	}
	code, body := rest(t, c, http.MethodGet, "/api/v1/machines?approvalState=maybe", viewer(t), "")
	if msg, _ := body["message"].(string); code != http.StatusBadRequest || !strings.Contains(msg, "use pending, approved, rejected") {
		t.Fatalf("bad filter: %d %v", code, body)
	}
	if code, _ := rest(t, c, http.MethodGet, "/api/v1/machines", "", ""); code != http.StatusUnauthorized {
		t.Fatalf("no token: %d, want 401", code)
	}
	if code, _ := rest(t, c, http.MethodGet, "/api/v1/machines", token(t, "ichor:nobody"), ""); code != http.StatusForbidden {
		t.Fatalf("a user without list: %d, want 403", code)
	}
	// The routes beside it still reach the gateway.
	if code, body := rest(t, c, http.MethodGet, "/api/v1/machines/enc-m1", viewer(t), ""); code != http.StatusOK {
		t.Fatalf("get: %d %v", code, body)
	}

	// A client that takes gzip gets the same JSON compressed; one that
	// refuses it (q=0) gets it plain.
	get := func(acceptEncoding string) (http.Header, []byte) {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, baseURL+"/api/v1/machines", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+viewer(t))
		req.Header.Set("Accept-Encoding", acceptEncoding)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = resp.Body.Close() }()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp.Header, b
	}
	plainHeader, plain := get("gzip;q=0")
	gzHeader, compressed := get("br, gzip")
	if plainHeader.Get("Content-Encoding") != "" || gzHeader.Get("Content-Encoding") != "gzip" {
		t.Fatalf("Content-Encoding: %q and %q", plainHeader.Get("Content-Encoding"), gzHeader.Get("Content-Encoding"))
	}
	zr, err := gzip.NewReader(bytes.NewReader(compressed))
	if err != nil {
		t.Fatal(err)
	}
	unzipped, err := io.ReadAll(zr)
	if err != nil || !bytes.Equal(unzipped, plain) || len(compressed) >= len(plain) {
		t.Fatalf("gzip body: %v, %d bytes compressed, %d plain, equal %v", err, len(compressed), len(plain), bytes.Equal(unzipped, plain))
	}

	// The watch stream (a path that starts like the list's) too.
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(wctx, http.MethodGet, baseURL+"/api/v1/machines:watch", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+viewer(t))
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(resp.Body).ReadString('\n')
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK || err != nil || !strings.Contains(line, `"result"`) || !strings.Contains(line, "EVENT_TYPE_ADDED") {
		t.Fatalf("REST watch: %d %q %v", resp.StatusCode, line, err)
	}

	// A change of the machines gives a new list (and new encodings).
	createMachine(t, "enc-m2", ichorv1alpha1.ApprovalPending, "")
	has := func(l *ichorv1.ListMachinesResponse) bool {
		for _, m := range l.GetMachines() {
			if m.GetName() == "enc-m2" {
				return true
			}
		}
		return false
	}
	if !has(grpcList()) || !has(restList("")) {
		t.Fatal("the list did not follow a new machine")
	}
}
