package pace

import "context"

// Config reads the configuration of the limiter name: one read, which
// changes nothing, where Stats also counts its leases. It fails with
// ErrNoSuchLimiter if the limiter does not exist.
func (r *Registry) Config(ctx context.Context, name string) (Config, error) {
	if err := checkName(name); err != nil {
		return Config{}, err
	}
	s, err := r.readConfig(ctx, name)
	if err != nil {
		return Config{}, err
	}
	return s.config(), nil
}
