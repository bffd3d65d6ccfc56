// The JS floor for scripts/bench (issue 15): what any JavaScript gateway pays at least — parse the
// client's JSON body, replace `model`, serialise it again, send it to `UPSTREAM` + the same path, and
// return the upstream's response as it is (workerd pipes the body natively).
//
// - `GET /_echo`: answers "ok" without a subrequest (the runtime's own floor).
// - `POST /<path>`: the pass-through above.

export default {
  async fetch(request, env) {
    const url = new URL(request.url);
    if (url.pathname === "/_echo") return new Response("ok");
    const body = await request.json();
    body.model = "u";
    return fetch(env.UPSTREAM + url.pathname, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify(body),
    });
  },
};
