package webhook

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/version"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/restart-supervisor/restart-supervisor/contract"
	"github.com/restart-supervisor/restart-supervisor/injector"
)

// DeliveryMode chooses how injected pods get the supervisor's binaries.
type DeliveryMode string

const (
	DeliveryCopy  DeliveryMode = "copy"  // always the install init container
	DeliveryImage DeliveryMode = "image" // always an image volume
	DeliveryAuto  DeliveryMode = "auto"  // an image volume once the whole cluster is seen to support it
)

// MinImageVolumeKubelet is the first kubelet release with ImageVolume on
// by default (beta and on in 1.35, GA in 1.36: pkg/features/
// kube_features.go, v1.37.2; beta and off in 1.33 and 1.34).
var MinImageVolumeKubelet = version.MustParseGeneric("1.35.0")

// imageVolumeRuntimes are the container runtimes, as a node reports them
// in status.nodeInfo.containerRuntimeVersion ("containerd://2.1.0"), and
// their first release that mounts image volumes: containerd 2.1 (its CRI
// plugin's internal/cri/server/container_image_mount.go is in v2.1.0 and
// not in v2.0.5, read from the module proxy) and CRI-O 1.31 (as the
// Kubernetes image-volume task page and KEP-4639 say; its source is not
// served by the module proxy here). Any other runtime counts as lacking it.
var imageVolumeRuntimes = map[string]*version.Version{
	"containerd": version.MustParseGeneric("2.1.0"),
	"cri-o":      version.MustParseGeneric("1.31.0"),
}

// ImageVolumeProbePodName names the pod the detector creates with
// dryRun=All; it is never stored.
const ImageVolumeProbePodName = "restart-injector-image-volume-probe"

// ImageVolumeDetector finds out whether every part of the cluster mounts
// image volumes: the API server keeps spec.volumes[].image (checked with
// a server-side dry-run create, as NativeDetector checks the restart
// fields), every kubelet is MinImageVolumeKubelet or newer and every
// node's runtime is one of imageVolumeRuntimes at its release or newer.
// The dry run is needed because a server with ImageVolume off drops the
// volume and its mounts and stores the pod anyway (pkg/api/pod/util.go
// dropImageVolumes, v1.34.4): its wrapped containers would not find the
// supervisor. A
// cluster in the middle of an upgrade is judged by its oldest node. Until
// the first check succeeds the answer is "no", so pods get the copy: it
// runs everywhere, an image volume on a node that cannot mount it keeps
// the pod from ever starting.
//
// What it cannot see: a 1.35+ kubelet whose operator turned ImageVolume
// off. Such a cluster sets --delivery=copy (docs/webhook.md).
type ImageVolumeDetector struct {
	Client    kubernetes.Interface
	Namespace string // where the probe pod is dry-run created; the webhook's own
	// Image is the supervisor image the probe pod mounts (never pulled:
	// a dry run stops before the scheduler and the kubelet).
	Image string
	Log   *slog.Logger
	// Gauge, when set, is 1 while pods get the image volume, else 0.
	Gauge interface{ Set(float64) }

	supported atomic.Bool
	// lastWhy is the last conclusion logged (Update's goroutine only).
	lastWhy string
}

// Delivery is the delivery pods get now.
func (d *ImageVolumeDetector) Delivery() injector.Delivery {
	if d.supported.Load() {
		return injector.DeliveryImage
	}
	return injector.DeliveryCopy
}

// Update checks once and takes the conclusion in, keeping the previous
// one when the check fails.
func (d *ImageVolumeDetector) Update(ctx context.Context) {
	ok, why, err := d.Check(ctx)
	if ctx.Err() != nil {
		return
	}
	if err != nil {
		d.log().Warn("image volumes: check failed; keeping previous conclusion", "delivery", d.Delivery(), "err", err)
		return
	}
	d.supported.Store(ok)
	if d.Gauge != nil {
		d.Gauge.Set(map[bool]float64{true: 1}[ok])
	}
	if why != d.lastWhy {
		d.log().Info("image volumes", "delivery", d.Delivery(), "reason", why)
		d.lastWhy = why
	}
}

func (d *ImageVolumeDetector) log() *slog.Logger {
	if d.Log == nil {
		return slog.Default()
	}
	return d.Log
}

// Check performs the checks once.
func (d *ImageVolumeDetector) Check(ctx context.Context) (supported bool, why string, err error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	got, err := d.Client.CoreV1().Pods(d.Namespace).Create(ctx, ImageVolumeProbePod(d.Namespace, d.Image), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	switch {
	case apierrors.IsInvalid(err):
		return false, "the API server refuses image volumes (ImageVolume off, or a server older than 1.31)", nil
	case err != nil:
		return false, "", fmt.Errorf("dry-run create of the image-volume probe pod: %w", err)
	case len(got.Spec.Volumes) == 0 || got.Spec.Volumes[0].Image == nil:
		return false, "the API server drops image volumes (ImageVolume off: it would store the pod without the volume and its mounts)", nil
	}
	nodes, err := d.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return false, "", fmt.Errorf("list nodes: %w", err)
	}
	if len(nodes.Items) == 0 {
		return false, "the API server keeps image volumes but there are no nodes to check", nil
	}
	if old := olderKubelets(nodes.Items, MinImageVolumeKubelet); len(old) > 0 {
		return false, fmt.Sprintf("the API server keeps image volumes but kubelets older than %s run on %s", MinImageVolumeKubelet, strings.Join(old, ", ")), nil
	}
	bad := listNodes(nodes.Items, func(n *corev1.Node) bool { return !runtimeMountsImages(n.Status.NodeInfo.ContainerRuntimeVersion) },
		func(n *corev1.Node) string { return fmt.Sprintf("%q", n.Status.NodeInfo.ContainerRuntimeVersion) })
	if len(bad) > 0 {
		return false, fmt.Sprintf("the API server and kubelets support image volumes but the container runtimes of %s do not (containerd 2.1 and CRI-O 1.31 are the first that do)",
			strings.Join(bad, ", ")), nil
	}
	return true, fmt.Sprintf("the API server keeps image volumes, all %d kubelets are %s or newer and their runtimes mount them", len(nodes.Items), MinImageVolumeKubelet), nil
}

// runtimeMountsImages reports whether a containerRuntimeVersion such as
// "containerd://2.1.0" names a runtime release that mounts image volumes.
func runtimeMountsImages(runtime string) bool {
	name, v, ok := strings.Cut(runtime, "://")
	min := imageVolumeRuntimes[name]
	if !ok || min == nil {
		return false
	}
	got, err := version.ParseGeneric(v)
	return err == nil && got.AtLeast(min)
}

// ImageVolumeProbePod is the pod the detector dry-run creates: the
// supervisor image as an image volume mounted by one container, as an
// injected pod has it.
func ImageVolumeProbePod(namespace, image string) *corev1.Pod {
	if image == "" {
		image = injector.DefaultSupervisorImage()
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: ImageVolumeProbePodName, Namespace: namespace},
		Spec: corev1.PodSpec{
			RestartPolicy:                corev1.RestartPolicyNever,
			AutomountServiceAccountToken: ptr.To(false),
			SecurityContext: &corev1.PodSecurityContext{
				RunAsNonRoot:   ptr.To(true),
				RunAsUser:      ptr.To[int64](65532),
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
			Volumes: []corev1.Volume{{Name: contract.BinVolume, VolumeSource: corev1.VolumeSource{Image: &corev1.ImageVolumeSource{Reference: image}}}},
			Containers: []corev1.Container{{
				Name:         "probe",
				Image:        "registry.k8s.io/pause:3.10",
				VolumeMounts: []corev1.VolumeMount{{Name: contract.BinVolume, MountPath: contract.BinDir, ReadOnly: true}},
				SecurityContext: &corev1.SecurityContext{
					AllowPrivilegeEscalation: ptr.To(false),
					Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
				},
			}},
		},
	}
}
