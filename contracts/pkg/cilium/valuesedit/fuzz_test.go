package valuesedit_test

import (
	"encoding/json"
	"errors"
	"reflect"
	"testing"

	"github.com/maeshinshin/ichor/contracts/pkg/cilium/valuesedit"
)

// FuzzParse feeds the Cilium values editor's parser (the webhook's check of
// a user layer, used by the console and `ichor cni values`) arbitrary YAML
// and JSON: no input panics it, a refusal is a *Refused with a field and a
// way out, and a layer it accepts is accepted again, unchanged, from its
// JSON (what is stored in spec.cni.cilium.values).
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"hubble: {enabled: true}\n",
		`{"hubble":{"relay":{"enabled":true}},"debug":{"enabled":false}}`,
		"ipam:\n  mode: kubernetes\n",
		"- a\n- b\n",
		"k8sServiceHost: x\n",
		"a: &x {b: *x}\n",
		"",
		"null",
		"operator:\n  replicas: 3\n  tolerations: [{key: a, operator: Exists}]\n",
	} {
		f.Add([]byte(s))
	}

	f.Fuzz(func(t *testing.T, data []byte) {
		v, err := valuesedit.Parse(data)
		if err != nil {
			var rf *valuesedit.Refused
			if !errors.As(err, &rf) || len(rf.Refusals) == 0 || rf.Refusals[0].Field == "" || rf.Refusals[0].WayOut == "" {
				t.Fatalf("a refusal without a field and a way out: %v", err)
			}

			return
		}

		js, err := json.Marshal(v)
		if err != nil {
			t.Fatalf("an accepted layer does not marshal: %v", err)
		}

		again, err := valuesedit.Parse(js)
		if err != nil {
			t.Fatalf("an accepted layer is refused from its own JSON %s: %v", js, err)
		}

		if len(v) == 0 && len(again) == 0 {
			return
		}

		if !reflect.DeepEqual(v, again) {
			t.Fatalf("the layer changes across its JSON:\n%v\n%v", v, again)
		}
	})
}
