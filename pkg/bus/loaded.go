package bus

import "strings"

// LoadedModelsBucket is the JetStream key-value bucket that keeps the
// models loaded through the repository API in explicit model control mode:
// one key per model (LoadedModelKey), whose value is the
// busv1.ModelControlRequest that loaded it. Executors write it as they
// load and unload, and read it when they start, so the set survives every
// executor restarting at once.
const LoadedModelsBucket = "nereid_loaded_models"

// loadedModelsStream is the stream JetStream keeps the bucket in.
const loadedModelsStream = "KV_" + LoadedModelsBucket

// LoadedModelsStream names the bucket's stream, for listing its keys.
func LoadedModelsStream() string { return loadedModelsStream }

// loadedModelsKeys matches the subjects of every key of the bucket.
const loadedModelsKeys = "$KV." + LoadedModelsBucket + ".>"

// LoadedModelsKeyPrefix starts the subject of every key of the bucket.
const LoadedModelsKeyPrefix = "$KV." + LoadedModelsBucket + "."

// kvEscape stands for Token's escape character in a key: key-value keys
// allow letters, digits and "-/_=." only.
const kvEscape = '='

// LoadedModelKey is the key of model name in LoadedModelsBucket: Token's
// escaping, with '=' in place of '~'.
func LoadedModelKey(name string) string {
	return strings.ReplaceAll(Token(name), string(escape), string(kvEscape))
}

// ParseLoadedModelKey inverts LoadedModelKey.
func ParseLoadedModelKey(key string) (string, error) {
	if strings.IndexByte(key, escape) >= 0 {
		return "", errToken
	}
	return Untoken(strings.ReplaceAll(key, string(kvEscape), string(escape)))
}

// jetStreamAPI is the prefix of JetStream's API subjects, served by the
// NATS server itself.
const jetStreamAPI = "$JS.API."
