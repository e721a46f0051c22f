// epochq console: asks before a form marked data-confirm is sent (cancel a job, pause a task type).
// Without JavaScript the forms still work, unasked; nothing else here.
document.addEventListener("submit", function (event) {
  var question = event.target.getAttribute && event.target.getAttribute("data-confirm");
  if (question && !window.confirm(question)) {
    event.preventDefault();
    event.stopImmediatePropagation();
  }
}, true);
