"""The web page's files (index.html, app.js, style.css), served by the agent with
`--web-listen` (meshhealth.agent.serving.web_server). Plain HTML, CSS and JavaScript:
no build step, no library, nothing loaded from elsewhere."""
