// The interactive API docs: Swagger UI, served by the package (no CDN), on /openapi.json.
window.ui = SwaggerUIBundle({
  url: "/openapi.json",
  dom_id: "#swagger-ui",
  deepLinking: true,
  persistAuthorization: false,
});
