package producer

// OptionPlaces returns where o applies, by the names its errors use: New,
// NewFromConn, UnaryClientInterceptor, WithCallOptions.
func OptionPlaces(o Option) map[string]bool {
	sc := o.scope()
	return map[string]bool{
		"New":                    sc&scopeNew != 0,
		"NewFromConn":            sc&scopeFromConn != 0,
		"UnaryClientInterceptor": sc&scopeInterceptor != 0,
		"WithCallOptions":        sc&scopeCall != 0,
	}
}

// OptionName is o's name, such as "WithMaxAttempts".
func OptionName(o Option) string { return o.name() }
