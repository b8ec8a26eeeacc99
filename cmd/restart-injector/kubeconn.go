package main

import (
	"github.com/spf13/pflag"
	"k8s.io/client-go/tools/clientcmd"
)

// kubeConnection is kubectl's connection flags on a command's flag set:
// --kubeconfig and client-go's override flags (-n/--namespace, --context,
// --cluster, --user, --server, --token, --as, --as-group, --as-uid,
// --certificate-authority, --client-certificate, --client-key,
// --insecure-skip-tls-verify, --tls-server-name, --proxy-url,
// --disable-compression, --request-timeout, --username, --password): the
// names, shorthands and meanings kubectl and cli-runtime's ConfigFlags
// bind, through the same clientcmd.BindOverrideFlags. Not ConfigFlags
// itself: its package brings kustomize and a disk cache into this binary,
// which is also the webhook's.
type kubeConnection struct {
	kubeconfig string
	overrides  clientcmd.ConfigOverrides
}

// bindKubeConnection adds the flags to fs; requestTimeout is
// --request-timeout's default ("0": none, kubectl's).
func bindKubeConnection(fs *pflag.FlagSet, requestTimeout string) *kubeConnection {
	k := &kubeConnection{}
	fs.StringVar(&k.kubeconfig, "kubeconfig", "", "kubeconfig `FILE` (default: $KUBECONFIG, then ~/.kube/config, as kubectl)")
	names := clientcmd.RecommendedConfigOverrideFlags("")
	names.Timeout.Default = requestTimeout
	clientcmd.BindOverrideFlags(&k.overrides, fs, names)
	return k
}

// clientConfig is the kubeconfig as the flags override it.
func (k *kubeConnection) clientConfig() clientcmd.ClientConfig {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = k.kubeconfig
	return clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &k.overrides)
}
