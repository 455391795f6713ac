// The call page's remembered choices (name, languages, text only) in localStorage; private mode remembers nothing.

export const store = {
  get(key, fallback) {
    try {
      return localStorage.getItem(`rtc-agent.call.${key}`) ?? fallback;
    } catch {
      return fallback;
    }
  },
  set(key, value) {
    try {
      localStorage.setItem(`rtc-agent.call.${key}`, value);
    } catch {
      /* private mode */
    }
  },
};
