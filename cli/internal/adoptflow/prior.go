package adoptflow

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/adopt"
	"github.com/maeshinshin/ichor/contracts/pkg/cilium"
)

// labelsSuffix names the key that keeps a record's labels beside its data.
const labelsSuffix = ".labels"

// keepPriorRelease moves the foreign Helm release's records out of Helm's
// way before the TalosCluster exists (the hand-over then installs Ichor's
// release over the running objects, as a first install): each record is
// copied into the Secret adopt.PriorReleaseSecret of the adoption's
// namespace, the copy is read back and compared byte for byte, and only then
// is the record deleted, on the condition that it has not changed since it
// was read (architecture, "Cilium", "Takeover"; never `helm uninstall`,
// which would delete Cilium's objects). A second run continues: records
// already kept and deleted are not looked for again.
func (s *state) keepPriorRelease(ctx context.Context) error {
	// Once the TalosCluster exists the hand-over may have installed Ichor's
	// own release under the same name: its records are not foreign.
	c := &ichorv1alpha1.TalosCluster{}
	switch err := s.conn.Client.Get(ctx, client.ObjectKeyFromObject(s.objs.Cluster), c); {
	case err == nil:
		s.p.Detailf("TalosCluster %s exists: the foreign records were kept before it was written", c.Name)

		return nil
	case !apierrors.IsNotFound(err):
		return s.conn.Explain(err, "reading TalosCluster "+s.objs.Cluster.Name)
	}

	var recs corev1.SecretList

	if err := s.retry(ctx, func(ctx context.Context) error {
		return s.conn.Client.List(ctx, &recs, client.InNamespace(cilium.Namespace), client.MatchingLabels{"owner": "helm", "name": cilium.ReleaseName})
	}); err != nil {
		return s.conn.Explain(err, "listing Helm's records of release "+cilium.ReleaseName)
	}

	key := client.ObjectKey{Namespace: s.o.Namespace, Name: adopt.PriorReleaseSecret}

	for i := range recs.Items {
		rec := &recs.Items[i]

		labels, err := json.Marshal(rec.Labels)
		if err != nil {
			return err
		}

		if err := s.retry(ctx, func(ctx context.Context) error {
			return s.keepRecord(ctx, key, rec, labels)
		}); err != nil {
			return s.conn.Explain(err, "keeping Helm's record "+rec.Name+" in "+key.Name)
		}

		// Read back: the copy must hold the record's bytes before the record goes.
		kept := &corev1.Secret{}
		if err := s.conn.Client.Get(ctx, key, kept); err != nil {
			return s.conn.Explain(err, "reading back "+key.Name)
		}

		if !bytes.Equal(kept.Data[rec.Name], rec.Data["release"]) || !bytes.Equal(kept.Data[rec.Name+labelsSuffix], labels) {
			return fmt.Errorf("the copy of Helm's record %s in %s/%s does not read back as the record: nothing was deleted; run the command again", rec.Name, key.Namespace, key.Name)
		}

		uid, rv := rec.UID, rec.ResourceVersion

		err = s.conn.Client.Delete(ctx, rec, client.Preconditions{UID: &uid, ResourceVersion: &rv})
		if err != nil && !apierrors.IsNotFound(err) {
			return s.conn.Explain(err, "deleting Helm's record "+rec.Name+" (it is kept in "+key.Name+")")
		}

		s.p.Detailf("%s kept in %s/%s, then deleted", rec.Name, key.Namespace, key.Name)
	}

	if len(recs.Items) == 0 {
		s.p.Detailf("no record left in %s: kept in %s/%s already", cilium.Namespace, key.Namespace, key.Name)
	}

	return nil
}

// keepRecord writes one record into the copy, creating it when it does not exist.
func (s *state) keepRecord(ctx context.Context, key client.ObjectKey, rec *corev1.Secret, labels []byte) error {
	kept := &corev1.Secret{}

	err := s.conn.Client.Get(ctx, key, kept)
	if apierrors.IsNotFound(err) {
		kept = &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{
				Namespace: key.Namespace, Name: key.Name,
				Labels: map[string]string{ichorv1alpha1.ClusterLabel: s.objs.Cluster.Name},
				Annotations: map[string]string{
					"ichor.maesh.dev/prior-release": "the records of Helm release " + cilium.Namespace + "/" + cilium.ReleaseName +
						" as they were before `ichor adopt` took Cilium over: per record, its release data as Helm stored it and its labels (key NAME.labels)",
				},
			},
			Data: map[string][]byte{rec.Name: rec.Data["release"], rec.Name + labelsSuffix: labels},
		}

		return s.conn.Client.Create(ctx, kept, client.FieldOwner(FieldOwner))
	}

	if err != nil {
		return err
	}

	if bytes.Equal(kept.Data[rec.Name], rec.Data["release"]) && bytes.Equal(kept.Data[rec.Name+labelsSuffix], labels) {
		return nil
	}

	before := kept.DeepCopy()
	if kept.Data == nil {
		kept.Data = map[string][]byte{}
	}

	kept.Data[rec.Name], kept.Data[rec.Name+labelsSuffix] = rec.Data["release"], labels

	return s.conn.Client.Patch(ctx, kept, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{}), client.FieldOwner(FieldOwner))
}
