// redis-unique Locks tab: asks before a form marked data-unique-confirm is sent.
document.addEventListener("submit", function (event) {
  var message = event.target.getAttribute && event.target.getAttribute("data-unique-confirm");
  if (message && !window.confirm(message)) {
    event.preventDefault();
  }
});
