package registry

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"path"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	corev1 "k8s.io/api/core/v1"
)

// KeychainFromSecrets builds a keychain from kubernetes.io/dockerconfigjson
// and kubernetes.io/dockercfg secrets, matching registries the way the
// kubelet does: the key's host (with "*" globs per DNS label) and port must
// match, and the key's path must be a prefix of the repository. The most
// specific key wins. Other secret types are ignored, as by the kubelet.
func KeychainFromSecrets(secrets []corev1.Secret) (authn.Keychain, error) {
	var kc secretKeychain
	for _, s := range secrets {
		var cfg map[string]dockerAuth
		switch s.Type {
		case corev1.SecretTypeDockerConfigJson:
			var doc struct {
				Auths map[string]dockerAuth `json:"auths"`
			}
			if err := json.Unmarshal(s.Data[corev1.DockerConfigJsonKey], &doc); err != nil {
				return nil, fmt.Errorf("secret %q: invalid %s: %v", s.Name, corev1.DockerConfigJsonKey, err)
			}
			cfg = doc.Auths
		case corev1.SecretTypeDockercfg:
			if err := json.Unmarshal(s.Data[corev1.DockerConfigKey], &cfg); err != nil {
				return nil, fmt.Errorf("secret %q: invalid %s: %v", s.Name, corev1.DockerConfigKey, err)
			}
		default:
			continue
		}
		for key, a := range cfg {
			ac := authn.AuthConfig{Username: a.Username, Password: a.Password, IdentityToken: a.IdentityToken, RegistryToken: a.RegistryToken}
			if a.Auth != "" && ac.Username == "" {
				raw, err := base64.StdEncoding.DecodeString(a.Auth)
				if err != nil {
					return nil, fmt.Errorf("secret %q: registry %q: auth is not base64", s.Name, key)
				}
				user, pass, ok := strings.Cut(string(raw), ":")
				if !ok {
					return nil, fmt.Errorf("secret %q: registry %q: auth is not user:password", s.Name, key)
				}
				ac.Username, ac.Password = user, pass
			}
			kc = append(kc, secretEntry{pattern: normalizeRegistryKey(key), auth: ac})
		}
	}
	return kc, nil
}

type dockerAuth struct {
	Username      string `json:"username,omitempty"`
	Password      string `json:"password,omitempty"`
	Auth          string `json:"auth,omitempty"`
	IdentityToken string `json:"identitytoken,omitempty"`
	RegistryToken string `json:"registrytoken,omitempty"`
}

type secretEntry struct {
	pattern string // host[:port][/path]
	auth    authn.AuthConfig
}

type secretKeychain []secretEntry

// normalizeRegistryKey strips the scheme and Docker Hub's legacy "/v1/".
func normalizeRegistryKey(k string) string {
	k = strings.TrimPrefix(strings.TrimPrefix(k, "https://"), "http://")
	k = strings.TrimSuffix(k, "/")
	switch k {
	case "index.docker.io/v1", "docker.io", "registry-1.docker.io":
		return name.DefaultRegistry
	}
	return k
}

func (kc secretKeychain) Resolve(res authn.Resource) (authn.Authenticator, error) {
	target := res.String() // registry[/repository]
	if r, ok := res.(name.Repository); ok {
		target = r.RegistryStr() + "/" + r.RepositoryStr()
	}
	best, bestLen := -1, -1
	for i, e := range kc {
		if matchRegistry(e.pattern, target) && len(e.pattern) > bestLen {
			best, bestLen = i, len(e.pattern)
		}
	}
	if best < 0 {
		return authn.Anonymous, nil
	}
	return authn.FromConfig(kc[best].auth), nil
}

func matchRegistry(pattern, target string) bool {
	pHost, pPath, _ := strings.Cut(pattern, "/")
	tHost, tPath, _ := strings.Cut(target, "/")
	pName, pPort, _ := strings.Cut(pHost, ":")
	tName, tPort, _ := strings.Cut(tHost, ":")
	if pPort != tPort {
		return false
	}
	pl, tl := strings.Split(pName, "."), strings.Split(tName, ".")
	if len(pl) != len(tl) {
		return false
	}
	for i := range pl {
		if ok, _ := path.Match(pl[i], tl[i]); !ok {
			return false
		}
	}
	return pPath == "" || tPath == pPath || strings.HasPrefix(tPath, pPath+"/")
}
