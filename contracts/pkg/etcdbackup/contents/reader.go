package contents

import (
	"context"
	"fmt"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
)

// Reader reads the namespaced custom resources of a snapshot as a
// client.Reader, so that the loaders the controller and the CLI share
// (render.LoadInput) read a snapshot the way they read the API. Only custom
// resources (stored as JSON) whose resource name is their kind in lower case
// plus "s" are served, with no selector but the namespace.
type Reader struct {
	C      *Contents
	Scheme *runtime.Scheme
}

var _ client.Reader = (*Reader)(nil)

func (r *Reader) resource(obj runtime.Object, list bool) (schema.GroupVersionKind, string, error) {
	gvk, err := apiutil.GVKForObject(obj, r.Scheme)
	if err != nil {
		return gvk, "", err
	}

	kind := gvk.Kind
	if list {
		kind = strings.TrimSuffix(kind, "List")
	}

	return gvk, strings.ToLower(kind) + "s", nil
}

// Get reads one object.
func (r *Reader) Get(_ context.Context, key client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	gvk, res, err := r.resource(obj, false)
	if err != nil {
		return err
	}

	k := RegistryPrefix + gvk.Group + "/" + res + "/" + key.Namespace + "/" + key.Name
	if _, ok := r.C.Get(k); !ok {
		return apierrors.NewNotFound(schema.GroupResource{Group: gvk.Group, Resource: res}, key.Name)
	}

	return r.C.DecodeJSON(k, obj)
}

// List reads the objects of a kind, in one namespace when the options name one.
func (r *Reader) List(_ context.Context, list client.ObjectList, opts ...client.ListOption) error {
	o := &client.ListOptions{}
	o.ApplyOptions(opts)

	if o.LabelSelector != nil && !o.LabelSelector.Empty() || o.FieldSelector != nil && !o.FieldSelector.Empty() {
		return fmt.Errorf("a snapshot is listed by namespace only, not by selector")
	}

	gvk, res, err := r.resource(list, true)
	if err != nil {
		return err
	}

	itemGVK := gvk.GroupVersion().WithKind(strings.TrimSuffix(gvk.Kind, "List"))

	var items []runtime.Object

	for _, ok := range r.C.NamespacedObjects(gvk.Group, res) {
		if o.Namespace != "" && ok.Namespace != o.Namespace {
			continue
		}

		item, err := r.Scheme.New(itemGVK)
		if err != nil {
			return err
		}

		if err := r.C.DecodeJSON(ok.Key, item); err != nil {
			return err
		}

		items = append(items, item)
	}

	return meta.SetList(list, items)
}
