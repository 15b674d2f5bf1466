package render_test

import (
	"bytes"
	"reflect"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/render"
)

// TestRenderReadsNoOtherClusterField: with every field of a TalosCluster
// that ClusterInput leaves out set (the rest of the metadata, every status
// field but the recorded kube-proxy mode, filled by reflection so that a
// field added later is filled too), Render gives the same bytes, and
// ClusterInput the same value. A render that starts reading another field
// of the cluster breaks this test, and a render cache keyed by ClusterInput
// (machinestate.Renders) would otherwise miss the change.
func TestRenderReadsNoOtherClusterField(t *testing.T) {
	for _, role := range []string{ichorv1alpha1.RoleControlPlane, ichorv1alpha1.RoleWorker} {
		in := input(t)
		in.Machine = machine("m-1", role)
		base := renderOK(t, in)
		baseKey := render.ClusterInput(in.Cluster)

		full := in.Cluster.DeepCopy()
		kubeProxy := full.Status.CNI.KubeProxy

		fill(reflect.ValueOf(&full.Status).Elem())
		full.Status.CNI.KubeProxy = kubeProxy
		full.UID, full.ResourceVersion, full.Generation = types.UID("3f9c"), "12345", 7
		full.CreationTimestamp = metav1.NewTime(time.Date(2026, 12, 4, 0, 0, 0, 0, time.UTC))
		full.Finalizers = []string{"ichor.maesh.dev/finalizer"}

		for _, f := range reflect.VisibleFields(reflect.TypeFor[ichorv1alpha1.TalosClusterStatus]()) {
			if reflect.ValueOf(full.Status).FieldByIndex(f.Index).IsZero() {
				t.Fatalf("status field %s was not filled", f.Name)
			}
		}

		in.Cluster = full
		if got := renderOK(t, in); !bytes.Equal(got.Bytes, base.Bytes) {
			t.Errorf("%s: the render changed with fields ClusterInput leaves out", role)
		}

		if !reflect.DeepEqual(render.ClusterInput(full), baseKey) {
			t.Errorf("%s: ClusterInput changed with fields it should leave out", role)
		}
	}
}

// fill sets every settable field under v to a value that is not its zero:
// strings "x", numbers 7, true, a time, one element per slice and map.
func fill(v reflect.Value) {
	if v.Type() == reflect.TypeFor[metav1.Time]() {
		v.Set(reflect.ValueOf(metav1.NewTime(time.Date(2026, 12, 4, 1, 2, 3, 0, time.UTC))))

		return
	}

	switch v.Kind() { //nolint:exhaustive // the kinds API types are made of
	case reflect.String:
		v.SetString("x")
	case reflect.Int, reflect.Int32, reflect.Int64:
		v.SetInt(7)
	case reflect.Uint, reflect.Uint32, reflect.Uint64:
		v.SetUint(7)
	case reflect.Float64:
		v.SetFloat(7)
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		fill(v.Elem())
	case reflect.Slice:
		v.Set(reflect.MakeSlice(v.Type(), 1, 1))
		fill(v.Index(0))
	case reflect.Map:
		k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
		fill(k)
		fill(e)
		v.Set(reflect.MakeMap(v.Type()))
		v.SetMapIndex(k, e)
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				fill(v.Field(i))
			}
		}
	}
}
